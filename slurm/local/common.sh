# Shared names of slurm/local/up and down (sourced, not run).
STATE=${COURSE_SLURM_DIR:-/var/tmp/course-slurm}
CONF=$STATE/slurm.conf
BRIDGE=cslurm0
NS_PREFIX=cslurm-node
VETH_PREFIX=cslv
HEAD_ADDR=10.77.0.1
node_addr() { echo "10.77.0.$((10 + $1))"; }
