# What the containers role writes on a node, read in one pass (raw: sh -c <this> sh USER PATH...):
# one line per path (a link with its target, a file with its mode, owner, group and sha256, a
# directory with its mode, owner and group, or absent), the MPI user's ids and
# libnvidia-container's CLI. The role compares the lines with the ones it wants and writes only
# what differs.
user=$1
shift
for p in "$@"; do
  if [ -L "$p" ]; then
    echo "link $p $(readlink "$p")"
  elif [ -f "$p" ]; then
    echo "file $p $(stat -c '%a %U %G' "$p") $(sha256sum <"$p" | cut -d' ' -f1)"
  elif [ -d "$p" ]; then
    echo "dir $p $(stat -c '%a %U %G' "$p")"
  else
    echo "absent $p"
  fi
done
ids=$(getent passwd "$user" | cut -d: -f3,4)
echo "user ${ids%%:*} ${ids##*:}"
echo "nvidia-cli $(command -v nvidia-container-cli || true)"
