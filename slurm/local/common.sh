# Shared names of slurm/local/up and down (sourced, not run).
# root's /run by default: no other user can create the directory before root does
STATE=${COURSE_SLURM_DIR:-/run/course-slurm}
CONF=$STATE/slurm.conf
BRIDGE=cslurm0
NS_PREFIX=cslurm-node
VETH_PREFIX=cslv
HEAD_ADDR=10.77.0.1
node_addr() { echo "10.77.0.$((10 + $1))"; }

# Root runs these scripts and trusts what is in $STATE (slurm.conf, PID files, markers): refuse a
# state directory that another user could have created or swapped first (e.g. under /var/tmp).
check_state_dir() {
  local dir=$1 owner mode
  if [ -L "$dir" ]; then
    echo "slurm/local: $dir is a symbolic link: refusing to use it (remove it, or set COURSE_SLURM_DIR)" >&2
    return 1
  fi
  [ -e "$dir" ] || return 0
  owner=$(stat -c %u "$dir"); mode=$(stat -c %a "$dir")
  if [ ! -d "$dir" ] || [ "$owner" != 0 ] || [ $((8#$mode & 8#022)) != 0 ]; then
    echo "slurm/local: $dir is not a directory of root's that only root may write (owner uid $owner, mode $mode):" \
         "refusing to trust it (remove it, or set COURSE_SLURM_DIR)" >&2
    return 1
  fi
}
