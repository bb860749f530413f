# Sourced by the device scripts: one deadline for a whole device call, so that every step's
# timeout is cut to what is left and the call ends inside the device tool's limit with its logs
# written.
#   . tools/deadline.sh; deadline_in SECONDS; timeout "$(left 120)" COMMAND...

deadline_in() {  # deadline_in SECONDS: the deadline is SECONDS from now
  deadline=$((SECONDS + $1))
}

left() {  # left WANT: WANT seconds, or fewer if the deadline is nearer (at least 1)
  local l=$((deadline - SECONDS))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
