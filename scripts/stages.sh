# Sourced by the scripts that run in CI: times each stage and prints the table when the script
# exits, passed or failed, so a slow or failing stage is named.
#
#   stage NAME COMMAND...          runs COMMAND as stage NAME
#   stage_start; X=$(...); stage_end NAME   for a stage whose output is captured

_stage_names=()
_stage_secs=()
_stage_began=$SECONDS
_stage_from=$SECONDS

_stage_current=
stage_start() { _stage_from=$SECONDS; }

stage_end() {
  _stage_names+=("$1")
  _stage_secs+=($((SECONDS - _stage_from)))
}

stage() {
  local name=$1
  shift
  stage_start
  _stage_current=$name
  echo "== $name" >&2
  "$@"
  stage_end "$name"
  _stage_current=
}

_stage_report() {
  local status=$?
  {
    echo
    echo "stage times:"
    local i
    for i in "${!_stage_names[@]}"; do
      printf '  %-44s %4d:%02d\n' "${_stage_names[$i]}" $((_stage_secs[i] / 60)) $((_stage_secs[i] % 60))
    done
    local total=$((SECONDS - _stage_began))
    [[ -n $_stage_current ]] && printf '  %-44s %4d:%02d  (failed here)\n' "$_stage_current" $(((SECONDS - _stage_from) / 60)) $(((SECONDS - _stage_from) % 60))
    printf '  %-44s %4d:%02d  (exit %d)\n' "total" $((total / 60)) $((total % 60)) "$status"
  } >&2
}
trap _stage_report EXIT
