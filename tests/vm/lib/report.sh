# shellcheck shell=bash
# Headings and PASS/FAIL lines of the rig's host scripts (vfio-user.sh, linux-mlx5.sh,
# linux-uhca.sh), sourced by them. Needs RIG_NAME (the script's name in headings).

# phase TEXT: a heading "=== RIG_NAME: TEXT (HH:MM:SS)" (UTC) after a blank line.
phase() { echo; echo "=== $RIG_NAME: $* ($(date -u +%H:%M:%S))"; }

# check NAME CMD...: runs CMD; prints "PASS NAME" and counts it in `pass` when it succeeds,
# "FAIL NAME" counted in `fail` when it does not. ok and ko print and count without a command.
pass=0 fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }
