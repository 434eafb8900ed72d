#!/usr/bin/env bash
# Fails when a change touches a public item or a config key (a `pub` line in the
# crates' sources) and CHANGELOG.md's Unreleased section does not change with it.
#
#   scripts/check-changelog.sh [BASE]   each commit in BASE..HEAD (default: the last
#                                       one), and the uncommitted changes
#
# A commit that changes `pub` lines without changing what users see (a doc comment
# moved, a private module's item) says so with a line `Changelog: none` in its message.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

base=${1:-HEAD~1}
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  echo "check-changelog: no $base in this clone (shallow or first commit); nothing to check"
  exit 0
fi

sources=(src actors/src)

# Whether the diff `git diff ARGS` adds or removes a public item or field.
touches_public() {
  git diff -U0 "$@" -- "${sources[@]}" |
    grep -Eq '^[+-][[:space:]]*pub[[:space:]]+(fn|struct|enum|trait|type|const|static|mod|use|[a-z_][a-z0-9_]*:)'
}

# Whether the diff `git diff ARGS…` changes a line of CHANGELOG.md's Unreleased
# section, TEXT being the newer CHANGELOG.md (whose line numbers the diff's use).
changes_unreleased() {
  local text=$1 end
  shift
  end=$(awk '/^## \[Unreleased\]/{in_section=1; next} in_section && /^## \[/{print NR; exit}' <<<"$text")
  git diff -U0 "$@" -- CHANGELOG.md |
    awk -v end="${end:-1000000}" '/^@@/{split($3, new, ","); if (substr(new[1], 2) + 0 < end) found=1} END{exit !found}'
}

failed=0
for commit in $(git rev-list --reverse "$base..HEAD"); do
  if touches_public "$commit^" "$commit" &&
    ! changes_unreleased "$(git show "$commit:CHANGELOG.md")" "$commit^" "$commit" &&
    ! git log -1 --format=%B "$commit" | grep -qi '^Changelog: none'; then
    echo "check-changelog: $(git log -1 --format='%h %s' "$commit")"
    echo "  changes a public item or config key, and CHANGELOG.md's Unreleased section does not"
    failed=1
  fi
done
if touches_public HEAD && ! changes_unreleased "$(cat CHANGELOG.md)" HEAD; then
  echo "check-changelog: the uncommitted changes touch a public item or config key, and"
  echo "  CHANGELOG.md's Unreleased section does not say what changed for users"
  failed=1
fi
exit "$failed"
