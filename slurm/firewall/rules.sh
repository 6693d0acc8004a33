# The course's worker-port firewall on one node (sourced by slurm/firewall/prolog and epilog, as
# root): which ports a job's workers may take, and the node's one nftables table that admits them.
#
# TensorFlow's gRPC server listens on every interface, IPv4 and IPv6, whatever address the cluster
# spec names, without authentication (TF 2.21: grpc_server_lib.cc binds "0.0.0.0:<port>"; neither
# ServerDef nor RPCOptions has an address to bind). The course puts each job's workers on ports the
# job id decides (helpers/slurm/step.py port_base). Each running job leaves a record here; the node's
# table `inet course_firewall`, rebuilt from the records, lets a new TCP connection reach a port a
# job claims only
#   - from one of that job's nodes (any other host: reset), and
#   - from this node only when the job's user opened it (a classmate's process: reset).
# Where two jobs' claims overlap, each job's user and nodes are admitted to the overlap.

# The centre's settings: the course's COURSE_PORT_RANGE (helpers/resolver.py, default 10000-20000)
# and the most workers per node one step of a course job runs (the Open OnDemand form allows 8).
PORT_RANGE=10000-20000
TASKS_PER_NODE=8
STEPS_PER_JOB=16  # helpers/slurm/step.py STEPS_PER_JOB
TABLE=course_firewall
STATE=${COURSE_FIREWALL_STATE:-/run/course-firewall}

firewall_fail() { echo "course firewall, job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-$(hostname)}: $*" >&2; exit 1; }

# job_ports JOBID: the port blocks ("LOW-HIGH" lines) the course's rule can give the job's first
# STEPS_PER_JOB steps with 1 to TASKS_PER_NODE workers per node: a step with w workers per node takes
# w ports from low + ((job * 16 + step) mod ((high - low + 1) / w)) * w.
job_ports() {
  local job=$1 low=${PORT_RANGE%-*} high=${PORT_RANGE#*-} width blocks step base
  [[ $low =~ ^[0-9]+$ && $high =~ ^[0-9]+$ && $low -le $high ]] || firewall_fail "PORT_RANGE=$PORT_RANGE is not LOW-HIGH"
  for ((width = 1; width <= TASKS_PER_NODE; width++)); do
    blocks=$(((high - low + 1) / width))
    ((blocks >= 1)) || break
    for ((step = 0; step < STEPS_PER_JOB; step++)); do
      base=$((low + (job * STEPS_PER_JOB + step) % blocks * width))
      echo "$base $((base + width - 1))"
    done
  done
}

# node_state: this node's directory of job records, root's only (never one another user made)
node_state() {
  local node=${SLURMD_NODENAME:-$(hostname -s)} dir
  [[ $node =~ ^[A-Za-z0-9._-]+$ ]] || firewall_fail "node name '$node' is not a host name"
  for dir in "$STATE" "$STATE/$node"; do
    [ -L "$dir" ] && firewall_fail "$dir is a symbolic link"
    mkdir -p -m 700 "$dir"
    [ "$(stat -c %u:%a "$dir")" = "0:700" ] || firewall_fail "$dir is not root's with mode 700"
  done
  echo "$STATE/$node"
}

# merged KEY LOW HIGH lines: overlapping or adjacent blocks of one key merged, as "KEY . LOW-HIGH"
merged() {
  sort -k1,1 -k2,2n | awk '
    function flush() { if (key != "") print key " . " lo "-" hi }
    $1 != key || $2 > hi + 1 { flush(); key = $1; lo = $2; hi = $3; next }
    $3 > hi { hi = $3 }
    END { flush() }'
}

# elements LINES...: "a, b, c" for an nft set (nothing for none)
elements() { paste -sd, - | sed 's/,/, /g'; }

# apply_table DIR: the node's table from every job record in DIR (lines "uid N", "ports LO HI",
# "ip4 ADDR", "ip6 ADDR"), replaced in one transaction; no record: no table
apply_table() {
  local dir=$1 records=() ports users src4 src6
  shopt -s nullglob
  records=("$dir"/*.job)
  shopt -u nullglob
  if [ ${#records[@]} -eq 0 ]; then
    if nft list table inet "$TABLE" >/dev/null 2>&1; then nft delete table inet "$TABLE"; fi
    return 0
  fi
  ports=$(for r in "${records[@]}"; do awk '$1 == "ports" {print "p", $2, $3}' "$r"; done | merged | sed 's/^p \. //' | elements)
  users=$(for r in "${records[@]}"; do
            awk '$1 == "uid" {u = $2} $1 == "ports" {p[++n] = $2 " " $3} END {for (i = 1; i <= n; i++) print u, p[i]}' "$r"
          done | merged | elements)
  src4=$(for r in "${records[@]}"; do
           awk '$1 == "ip4" {a[++m] = $2} $1 == "ports" {p[++n] = $2 " " $3}
                END {for (j = 1; j <= m; j++) for (i = 1; i <= n; i++) print a[j], p[i]}' "$r"
         done | merged | elements)
  src6=$(for r in "${records[@]}"; do
           awk '$1 == "ip6" {a[++m] = $2} $1 == "ports" {p[++n] = $2 " " $3}
                END {for (j = 1; j <= m; j++) for (i = 1; i <= n; i++) print a[j], p[i]}' "$r"
         done | merged | elements)
  {
    echo "add table inet $TABLE"
    echo "delete table inet $TABLE"
    echo "table inet $TABLE {"
    echo "  set ports { type inet_service; flags interval; elements = { $ports } }"
    echo "  set users { typeof meta skuid . tcp dport; flags interval; elements = { $users } }"
    [ -z "$src4" ] || echo "  set nodes4 { typeof ip saddr . tcp dport; flags interval; elements = { $src4 } }"
    [ -z "$src6" ] || echo "  set nodes6 { typeof ip6 saddr . tcp dport; flags interval; elements = { $src6 } }"
    echo "  chain input {"
    echo "    type filter hook input priority filter; policy accept;"
    echo "    tcp dport != @ports return"
    echo "    ct state != new return"
    echo "    iif lo accept"  # from this node: its output chain has checked who opened it
    [ -z "$src4" ] || echo "    ip saddr . tcp dport @nodes4 accept"
    [ -z "$src6" ] || echo "    ip6 saddr . tcp dport @nodes6 accept"
    echo "    reject with tcp reset"
    echo "  }"
    echo "  chain output {"
    echo "    type filter hook output priority filter; policy accept;"
    echo "    tcp dport != @ports return"
    echo "    ct state != new return"
    echo "    meta skuid . tcp dport @users accept"
    echo "    oif lo reject with tcp reset"  # loopback and this node's own addresses
    [ -z "$src4" ] || echo "    ip daddr . tcp dport @nodes4 reject with tcp reset"
    [ -z "$src6" ] || echo "    ip6 daddr . tcp dport @nodes6 reject with tcp reset"
    echo "  }"
    echo "}"
  } | nft -f - || firewall_fail "nft refused the node's rules"
}
