# Sourced (sh) by the fake workers worker.sh and ft_worker.sh: takes MODE and DIR off the command
# line into mode and dir, and the worker's rank and restart from the launcher's environment into
# r and n ("x" when unset, so that a bad launch shows in the file names).
set -u
mode=$1
dir=$2
shift 2
r=${RANK:-x}
n=${TORCHELASTIC_RESTART_COUNT:-x}
