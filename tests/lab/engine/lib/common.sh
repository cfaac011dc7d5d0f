# Shared by the engine stand-ins (sourced by busybox sh).
# The rank rendezvous is a line over TCP: a worker sends "rank R" (or "ray-worker ADDR") to the
# head's listener, which appends it to a file and answers "ok"; the head serves HTTP only once
# enough distinct lines arrived, like a real engine that serves only when every rank has joined.

# How long a worker keeps trying to reach its head (real engines retry for a while too).
LAB_JOIN_TIMEOUT=${LAB_JOIN_TIMEOUT:-20}
# How long a head waits for its workers before giving up.
LAB_RANK_TIMEOUT=${LAB_RANK_TIMEOUT:-600}
LAB_LIB=/usr/local/lib/lab

# print_start NAME ARG...: the argv and the fabric env, which tests read from `docker logs`.
print_start() {
    tag=$1; shift
    printf '[%s] argv:' "$tag"
    for a in "$@"; do printf " '%s'" "$a"; done
    printf '\n'
    env | grep -E '^(NCCL_|GLOO_|VLLM_HOST_IP=|MASTER_ADDR=)' | sort | sed "s/^/[$tag] env: /"
}

die() { echo "[$TAG] error: $*" >&2; exit 1; }

now() { date +%s; }

# join HOST PORT LINE: deliver LINE to a head's listener, retrying up to LAB_JOIN_TIMEOUT seconds.
join() {
    [ -n "$1" ] && [ -n "$2" ] || die "no head address to join (host='$1' port='$2')"
    # Fault injection for the deploy tests: a worker that dies during start.
    [ -z "$LAB_FAIL_JOIN" ] || die "cannot join $1:$2: $LAB_FAIL_JOIN"
    deadline=$(( $(now) + LAB_JOIN_TIMEOUT ))
    while :; do
        reply=$(echo "$3" | nc -w 3 "$1" "$2" 2>/dev/null)
        if [ "$reply" = ok ]; then
            echo "[$TAG] joined $1:$2 as '$3'"
            return 0
        fi
        [ "$(now)" -lt "$deadline" ] || die "cannot reach head at $1:$2 after ${LAB_JOIN_TIMEOUT}s"
        sleep 0.2
    done
}

# listen PORT FILE: accept join lines on PORT in the background, appending them to FILE.
listen() {
    mkdir -p "$(dirname "$2")"
    : >"$2"
    JOIN_FILE=$2 nc -ll -p "$1" -e "$LAB_LIB/record-join" &
    echo "[$TAG] listening for ranks on port $1"
}

# await FILE N WHAT: wait until FILE holds N distinct lines.
await() {
    deadline=$(( $(now) + LAB_RANK_TIMEOUT ))
    echo "[$TAG] waiting for $2 $3"
    while :; do
        have=0
        [ -f "$1" ] && have=$(sort -u "$1" | wc -l)
        [ "$have" -ge "$2" ] && break
        [ "$(now)" -lt "$deadline" ] || die "only $have of $2 $3 joined after ${LAB_RANK_TIMEOUT}s"
        sleep 0.2
    done
    echo "[$TAG] all $2 $3 joined"
}

# serve HOST PORT MODEL OWNER: answer GET /health and /v1/models until stopped.
serve() {
    root=/tmp/lab-http
    mkdir -p "$root/v1"
    : >"$root/health"
    printf '{"object":"list","data":[{"id":"%s","object":"model","owned_by":"%s"}]}\n' "$3" "$4" \
        >"$root/v1/models"
    echo "[$TAG] serving $3 on http://$1:$2"
    httpd -f -p "$1:$2" -h "$root" &
    wait_child $!
}

# stay: keep a worker up until it is stopped.
stay() {
    sleep 2147483647 &
    wait_child $!
}

# wait_child PID: wait for PID, stopping it on SIGTERM/SIGINT. Needed because the stand-in runs as
# PID 1 of its container, which ignores signals it has no handler for: without the trap,
# `docker stop` would wait the whole stop_grace_period.
wait_child() {
    trap "kill $1 2>/dev/null; echo '[$TAG] stopped'; exit 0" TERM INT
    wait "$1"
    rc=$?
    echo "[$TAG] child exited with status $rc" >&2
    exit "$rc"
}

# is_int VALUE
is_int() { case "$1" in ''|*[!0-9]*) return 1 ;; *) return 0 ;; esac; }
