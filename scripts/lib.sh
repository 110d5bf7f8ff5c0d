# Shell helpers the scripts here share; source it after cd to the
# repository's root. $name prefixes the messages (the script's name).

# free_ports N prints N free loopback ports.
free_ports() {
  python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss:
    s.close()' "$1"
}

# wait_port PORT PID waits up to 20 s for PORT to accept connections and
# exits the script if PID exits first or the port never opens.
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "$name: pid $2 exited before port $1 opened" >&2; exit 1; }
    sleep 0.1
  done
  echo "$name: port $1 never opened" >&2
  exit 1
}
