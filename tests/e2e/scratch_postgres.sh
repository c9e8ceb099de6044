# Sourced by the shared-store scripts: a PostgreSQL server in a temporary
# folder, on a Unix socket only (listen_addresses=''), as the postgres user
# when run as root (initdb refuses root), trusted logins, stopped and deleted
# on exit, a failure included. Sets $work (the folder, also XDG_CACHE_HOME's
# parent, so no run touches the user's own database) and $url. Exits 77
# (ctest: skipped) without the server package. The C++ tests' twin is
# tests/unit/scratch_postgres.h.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [[ -z "$pg_bin" || ! -x "$pg_bin/initdb" ]]; then
  echo "SKIP: no PostgreSQL server (/usr/lib/postgresql/*/bin/initdb; the postgresql package)"
  exit 77
fi
pg_as=()
if [[ $(id -u) == 0 ]]; then pg_as=(runuser -u postgres --); fi

work=$(mktemp -d /tmp/collage-pg-e2e-XXXXXX)
[[ ${#pg_as[@]} == 0 ]] || chown postgres "$work"
stop_scratch_postgres() {
  "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap stop_scratch_postgres EXIT
"${pg_as[@]}" "$pg_bin/initdb" -D "$work/data" -U postgres -A trust --no-sync >"$work/setup.log" 2>&1
"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$work/data" -w -l "$work/server.log" \
  -o "-c listen_addresses='' -k $work -c fsync=off" start >>"$work/setup.log"
"$pg_bin/createdb" -h "$work" -U postgres collage
url="postgresql://postgres@/collage?host=$work"
export XDG_CACHE_HOME="$work/cache"
