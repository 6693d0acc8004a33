# The course's one check that its Python is safe to run, sourced by all five launchers: the batch
# scripts (slurm/train.sbatch, slurm/engines.sbatch, slurm/gpucheck.sbatch), the hub's server job
# (slurm/jupyterhub/server.sbatch.j2) and this Open OnDemand app's before.sh. It lives in the app's
# template/ because a centre copies the app's directory alone (the others read it from the checkout,
# after checking the checkout's slurm/ the same way).
#
#   course_python_check PYTHON [CHECKOUT]   nothing when safe; else one line on stderr, status 2
#
# Safe: owned by root, by you, or by the course account COURSE_TRUSTED_UID names (the hub's
# COURSE_HUB_INSTALL_OWNER), and writable by its owner only (no group or other write bit):
# whoever else could write there could choose what runs as you. Checked, before the Python runs:
# the venv (two levels above PYTHON), its bin/, pyvenv.cfg (its `home` names the Python that runs),
# lib/ and lib/python3.*/ (where a site-packages could be planted), every file and directory of
# its site-packages (.pth files run at start-up), the Python itself (resolved); given CHECKOUT (the
# course's editable install), the checkout and every file of its helpers/ and course_server/.

course_unsafe_path() {  # PATH... [-find options]: the first that is not a link and not safe, if any
  local paths=()
  while [ $# -gt 0 ] && [ "${1:0:1}" != "-" ]; do  # paths that are not there (a glob unmatched) hold nothing
    { [ -e "$1" ] || [ -L "$1" ]; } && paths+=("$1")
    shift
  done
  [ ${#paths[@]} -gt 0 ] || return 0
  # a find that fails (a directory it cannot read) fails closed: the first path is named
  find "${paths[@]}" "$@" ! -type l \( -perm /022 -o \( ! -uid 0 ! -uid "$(id -u)" ! -uid "${COURSE_TRUSTED_UID:-0}" \) \) \
    -print -quit 2>/dev/null || echo "${paths[0]}"
}

course_python_check() {
  local python=$1 checkout=${2:-} venv bad
  case ${COURSE_TRUSTED_UID:-0} in
    *[!0-9]*) echo "error: COURSE_TRUSTED_UID=$COURSE_TRUSTED_UID is not a uid; not running the course's Python" >&2
              return 2 ;;
  esac
  venv=$(dirname "$(dirname "$python")")
  bad=$(course_unsafe_path "$venv" "$venv/bin" "$venv/pyvenv.cfg" "$venv/lib" "$venv"/lib/python3* \
        "$(readlink -f "$python")" -maxdepth 0)
  [ -n "$bad" ] || bad=$(course_unsafe_path "$venv"/lib/python3*/site-packages)
  if [ -z "$bad" ] && [ -n "$checkout" ]; then
    bad=$(course_unsafe_path "$checkout" -maxdepth 0)
    [ -n "$bad" ] || bad=$(course_unsafe_path "$checkout/helpers" "$checkout/course_server")
  fi
  [ -z "$bad" ] && return 0
  echo "error: $bad belongs to uid $(stat -c %u "$bad") with mode $(stat -c %a "$bad"): the course's Python" \
       "and what it imports must be root's (or the course account's) or yours and writable by their owner only;" \
       "not running its Python" >&2
  return 2
}
