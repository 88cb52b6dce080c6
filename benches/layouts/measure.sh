#!/bin/sh
# Bytes per batch of batches, task_produce_log and partitions (with their
# indexes) as the registry stores them and as by_number.sql would, both as
# dense copies of an API-written SQLite database's rows, so the two compare.
#   target/release/batchgate serve --db sqlite:///tmp/l.db --listen 127.0.0.1:18091 --scan-interval 0 &
#   python3 benches/layouts/drive.py 18091 32 100 long    # or short
#   benches/layouts/measure.sh /tmp/l.db
set -eu
src=$(realpath "$1"); here=$(dirname "$0"); work=$(mktemp -d)
n=$(sqlite3 "$src" "SELECT count(*) FROM batches")
sqlite3 "$src" ".schema batches" ".schema task_produce_log" ".schema partitions" | sqlite3 "$work/stored.db"
sqlite3 "$work/stored.db" "ATTACH '$src' AS s; INSERT INTO batches SELECT * FROM s.batches ORDER BY id;
  INSERT INTO task_produce_log SELECT * FROM s.task_produce_log ORDER BY rowid; INSERT INTO partitions SELECT * FROM s.partitions ORDER BY rowid;"
sqlite3 "$work/by_number.db" < "$here/by_number.sql"
sed "s#'SOURCE'#'$src'#" "$here/by_number_fill.sql" | sqlite3 "$work/by_number.db"
echo "$n batches; bytes per batch"
for db in stored by_number; do
  sqlite3 "$work/$db.db" "SELECT '$db', group_concat(t || ' ' || b, ', '), sum(b) FROM (SELECT CASE m.tbl_name WHEN 'produce_log' THEN 'task_produce_log' ELSE m.tbl_name END t, CAST(round(sum(pgsize) * 1.0 / $n) AS INTEGER) b
    FROM dbstat JOIN sqlite_master m ON m.name = dbstat.name WHERE m.tbl_name IN ('batches', 'partitions', 'task_produce_log', 'produce_log') GROUP BY 1 ORDER BY 1);"
done
rm -r "$work"
