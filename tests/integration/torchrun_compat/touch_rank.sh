#!/bin/sh
# Worker for test_torchrun_compat*.sh (--no-python), in the role of pytorch's
# test/distributed/launcher/bin/test_script.sh: touches DIR/$RANK and says so.
FILE="$1/$RANK"
echo "creating $FILE"
touch "$FILE"
