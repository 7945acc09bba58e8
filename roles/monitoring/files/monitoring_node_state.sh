# What the monitoring role needs to know of a node, read in one round trip (ansible.builtin.raw,
# "sh -c" with the node's name and the DCGM exporter units as arguments). Reads only.
# Lines: "package NAME VERSION" (installed ones), "address IPV4" (what the node's name resolves
# to on the node, first IPv4 address), "dcgm UNIT" (an installed DCGM exporter unit).
exec 2>/dev/null
name=$1
shift
dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' \
  prometheus-node-exporter prometheus | awk '$1 == "installed" {print "package " $2 " " $3}'
getent ahostsv4 "$name" | awk 'NR == 1 {print "address " $1}'
for unit in "$@"; do
  if systemctl list-unit-files --no-legend "$unit" | grep -q .; then
    echo "dcgm $unit"
  fi
done
true
