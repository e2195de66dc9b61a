#!/bin/bash
# Checkpoint recorder costs on this machine, one run:
#
#   bench/ckpt_bench.sh [RESULTS_FILE]          (root for part c's loop-mounted file systems)
#
# (a) hashing throughput: muster's recorder against `xxhsum -H3` (Debian package xxhash) on the
#     same file, the same XXH3-64 (the two sums are compared): a SPARSE_GB (20) GiB *sparse* file
#     (holes: no disk I/O; its pages are evicted before each reader (posix_fadvise DONTNEED), so
#     each one pays the kernel's zero-filling of page-cache pages, as a first read does) and a
#     REAL_GB (4) GiB file of random bytes read into the page cache before each reader (fincore
#     says how much of it was there). The two readers alternate in which goes first. muster's figure: a
#     job (`muster run` against a real `muster server --http`) whose worker renames the file into
#     --checkpoint-dir (that is its close: the bytes were written before) and the time from the
#     rename to muster's line "checkpoint NAME recorded (... xxh3 ...)", polled every 5 ms; when
#     that line carries a time of its own ("... N ms"), that one is used instead. xxhsum's: the
#     wall time of `xxhsum -H3 FILE`. REPS (3) runs each, interleaved; medians. Goal: muster
#     >= 90 % of xxhsum.
# (b) heartbeat jitter during the SPARSE_GB record (and the REAL_GB one): the server's /status
#     heartbeat_gap_max_ms for the node (the longest silence between two messages of that
#     agent since its JOIN; heartbeats every 1000 ms), sampled every 100 ms from the rename until
#     1.5 s after the record line, with the longest last_seen_ms_ago seen (a silence that ends
#     in a dropped connection shows only there) and whether the agent logged "rendezvous
#     server lost" (no message from the server for 3 s: its loop was blocked that long).
#     A hash on the agent's event loop shows as a gap as long as the hash.
# (c) the last-good copy: reflink (FICLONE) against a real copy, of a REAL_GB file, on a loop-
#     mounted XFS (mkfs.xfs -m reflink=1) and btrfs image when mkfs and loop devices work here,
#     and on the native file system of the work directory: `cp --reflink=always` and
#     `cp --reflink=never` (the proxy), and the primitives themselves from python (the FICLONE
#     ioctl; os.copy_file_range, which XFS and btrfs may answer with a clone; read/write in 1 MiB
#     blocks), each timed to its return and to fsync of the copy; filefrag tells whether the
#     copy's extents are shared. REPS runs each, medians.
# Environment: MUSTER_BIN (<repo>/build/muster), SPARSE_GB, REAL_GB, REPS, PARTS ("a b c"),
# RECORD_MODE (rename | inplace, see record_once), CKPT_SETTLE,
# TMPDIR (where the files go: SPARSE_GB sparse + 2 x REAL_GB + the images' used space, about
# 3 x REAL_GB), IMG_GB (image size, default 2.5 x REAL_GB), FS ("xfs btrfs").
# Results: one line per figure on stderr ("ckpt_bench: ..."), the table on stdout and in
# RESULTS_FILE.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
MUSTER_BIN=${MUSTER_BIN:-$SRC/build/muster}
SPARSE_GB=${SPARSE_GB:-20}
REAL_GB=${REAL_GB:-4}
REPS=${REPS:-3}
PARTS=${PARTS:-a b c}
FS=${FS:-xfs btrfs}
IMG_GB=${IMG_GB:-$(awk -v r="$REAL_GB" 'BEGIN {printf "%d", r * 2.5 + 1}')}
RECORD_MODE=${RECORD_MODE:-rename}
CKPT_SETTLE=${CKPT_SETTLE:-0.2}
OUTFILE=${1:-}

. "$SRC/bench/lib.sh"
bench_init ckpt_bench
MOUNTS="" LOOPS=""
# shellcheck disable=SC2317 # called by the EXIT trap
ckb_cleanup() {
    local m l
    for m in $MOUNTS; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    for l in $LOOPS; do losetup -d "$l" 2>/dev/null; done
    bench_cleanup
}
trap ckb_cleanup EXIT
RES=$W/results.txt
: > "$RES"
row() { echo "$*" >> "$RES"; }
# mbs BYTES MS -> MB/s (10^6), n/a when either is missing
mbs() { awk -v b="$1" -v t="$2" 'BEGIN {if (b == "" || t == "" || t == "n/a" || t <= 0) print "n/a"; else printf "%.0f", b / 1e6 / (t / 1e3)}'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.0f%%", 100 * a / b}'; }
now_ns() { date +%s%N; }
fstype() { findmnt -n -o FSTYPE -T "$1" 2> /dev/null || stat -f -c %T "$1"; }

log "$(date -u +%FT%TZ) on $(hostname): $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), load $(cut -d' ' -f1-3 /proc/loadavg)"
log "work directory $W on $(fstype "$W") ($(df -h --output=avail "$W" | tail -1 | xargs) free)"
row "# muster checkpoint recorder bench — $(date -u +%FT%TZ)"
row "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)"
have_muster=0
if [ -x "$MUSTER_BIN" ]; then
    have_muster=1
    row "# muster: $("$MUSTER_BIN" --version 2>&1 | head -1) ($MUSTER_BIN)"
else
    log "$MUSTER_BIN not found: muster figures are n/a"
fi
have_xxhsum=0
if command -v xxhsum > /dev/null 2>&1; then
    have_xxhsum=1
    row "# xxhsum: $(xxhsum --version 2>&1 | head -1 | xargs)"
else
    log "xxhsum not found (apt-get install xxhash): its figures are n/a"
fi
row "# runs: $REPS each, medians; sparse ${SPARSE_GB} GiB, real ${REAL_GB} GiB (MB/s are 10^6 bytes/s)"

# ------------------------------------------------------------------ files
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
SPARSE=$W/sparse.bin REAL=$W/real.bin
if want a || want b; then
    truncate -s "${SPARSE_GB}G" "$SPARSE"
    log "sparse file: $(stat -c %s "$SPARSE") bytes, $(du -k "$SPARSE" | cut -f1) KiB allocated"
fi
if want a || want c; then
    t=$(now_ns)
    head -c "${REAL_GB}G" /dev/urandom > "$REAL"
    log "real file: $(stat -c %s "$REAL") bytes of /dev/urandom written in $(( ($(now_ns) - t) / 1000000 )) ms"
fi
sync # no writeback of the new file under the measurements

# ------------------------------------------------------------------ (a), (b) muster's recorder
TOKEN=$W/token
echo "ckpt-bench-token-$$-0123456789abcdef" > "$TOKEN"
chmod 600 "$TOKEN"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# status_sampler JOB STOPFILE OUTFILE: polls /status every 100 ms until STOPFILE exists and
# writes "GAP_MAX SILENCE_MAX SAMPLES MISSING": the largest heartbeat_gap_max_ms of the job's
# nodes, the longest last_seen_ms_ago seen (a silence that is still going on, or that ended in a
# lost connection, shows only there) and the samples in which the job or its node was absent
cat > "$W/sampler.py" <<'EOP'
import json, os, sys, time, urllib.request
url, job, stop, out = sys.argv[1:5]
gap = silence = n = missing = 0
while True:
    n += 1
    try:
        st = json.load(urllib.request.urlopen(url, timeout=2))
        nodes = [nd for j in st.get("jobs", []) if j.get("id") == job for nd in j.get("nodes", [])]
        if not nodes:
            missing += 1
        for nd in nodes:
            if nd.get("heartbeat_gap_max_ms") is not None:
                gap = max(gap, nd["heartbeat_gap_max_ms"])
            else:
                missing += 1
            if nd.get("last_seen_ms_ago") is not None:
                silence = max(silence, nd["last_seen_ms_ago"])
    except Exception:
        missing += 1
    if os.path.exists(stop):
        break
    time.sleep(0.1)
with open(out, "w") as f:
    f.write(f"{gap} {silence} {n} {missing}\n")
EOP

# record_once FILE TAG -> "MS SOURCE SUM GAP_BEFORE GAP_DURING SILENCE LOST MISSING/SAMPLES" (or
# "fail WHY"). RECORD_MODE=rename (default): the job's worker renames FILE (same file system)
# into a fresh --checkpoint-dir as ckpt_1.bin, and it is moved back after; the clock starts at
# the rename. RECORD_MODE=inplace (files rewritten in place; needs --checkpoint-settle): the
# worker copies FILE into the directory as ckpt.pt (cp --sparse=always: holes stay holes), as
# torch.save writes in place; the clock starts when cp has closed it, and the --checkpoint-
# settle time (CKPT_SETTLE, default 0.2 s) is subtracted from the figure.
SRV_PID=""
server_start() {
    PORT=$(free_port)
    HTTP=$(free_port)
    "$MUSTER_BIN" server --listen "127.0.0.1:$PORT" --http "127.0.0.1:$HTTP" --token-file "$TOKEN" -q \
        2> "$W/server.err" &
    SRV_PID=$!
    BG="$BG $SRV_PID"
    local i
    for i in $(seq 100); do curl -s --max-time 1 "http://127.0.0.1:$HTTP/status" > /dev/null && return 0; sleep 0.05; done
    log "the server did not answer on /status: $(tail -2 "$W/server.err")"
    return 1
}
record_once() {
    local file=$1 tag=$2 d=$W/ck_$2 i t1 line ms src sum g0 gap sil n miss lost name settle=()
    rm -rf "$d" "$W/go" "$W/release" "$W/t_mv" "$W/sampled" "$W/stop_sampler"
    mkdir -p "$d"
    if [ "$RECORD_MODE" = inplace ]; then
        name=ckpt.pt
        settle=(--checkpoint-settle "$CKPT_SETTLE")
        cat > "$W/worker.sh" <<EOW
#!/bin/bash
while [ ! -e "$W/go" ]; do sleep 0.01; done
cp --sparse=always "$file" "\$MUSTER_CHECKPOINT_DIR/ckpt.pt"
date +%s%N > "$W/t_mv"
while [ ! -e "$W/release" ]; do sleep 0.05; done
EOW
    else
        name=ckpt_1.bin
        mv "$file" "$d/.ckpt_1.bin.tmp"
        cat > "$W/worker.sh" <<EOW
#!/bin/bash
while [ ! -e "$W/go" ]; do sleep 0.01; done
mv "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp" "\$MUSTER_CHECKPOINT_DIR/ckpt_1.bin"
date +%s%N > "$W/t_mv"
while [ ! -e "$W/release" ]; do sleep 0.05; done
EOW
    fi
    chmod +x "$W/worker.sh"
    "$MUSTER_BIN" run --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$PORT" --rdzv-id "ckb-$tag" \
        --token-file "$TOKEN" --checkpoint-dir "$d" ${settle[@]+"${settle[@]}"} --preflight off \
        --no-python "$W/worker.sh" > "$W/run_$tag.out" 2> "$W/run_$tag.err" &
    local mp=$!
    # 3 heartbeats first: the gap before the record is a figure of its own
    sleep 3.2
    python3 "$W/sampler.py" "http://127.0.0.1:$HTTP/status" "ckb-$tag" "$W/stop_sampler" "$W/sampled0" &
    touch "$W/stop_sampler"
    wait $!
    read -r g0 _ < "$W/sampled0"
    rm -f "$W/stop_sampler"
    python3 "$W/sampler.py" "http://127.0.0.1:$HTTP/status" "ckb-$tag" "$W/stop_sampler" "$W/sampled" &
    local sp=$!
    touch "$W/go"
    line=""
    for i in $(seq 24000); do # 120 s
        line=$(grep -m1 "checkpoint $name recorded" "$W/run_$tag.err") && break
        kill -0 "$mp" 2> /dev/null || break
        sleep 0.005
    done
    t1=$(now_ns)
    sleep 1.5 # a heartbeat after the record closes the gap
    touch "$W/stop_sampler"
    wait "$sp"
    read -r gap sil n miss < "$W/sampled"
    touch "$W/release"
    wait "$mp" 2> /dev/null
    if [ "$RECORD_MODE" = rename ]; then
        mv "$d/ckpt_1.bin" "$file" 2> /dev/null || mv "$d/.ckpt_1.bin.tmp" "$file" 2> /dev/null
    fi
    rm -rf "$d"
    if [ -z "$line" ] || [ ! -s "$W/t_mv" ]; then
        echo "fail no-record-line($(grep -m1 -i 'checkpoint' "$W/run_$tag.err" | cut -c1-80))"
        return
    fi
    lost=0
    grep -q "rendezvous server lost" "$W/run_$tag.err" && lost=1
    sum=$(sed -n 's/.*xxh3 \([0-9a-f]*\).*/\1/p' <<< "$line")
    ms=$(sed -n 's/.*(.* \([0-9][0-9.]*\) ms[,)].*/\1/p' <<< "$line")
    src=line
    if [ -z "$ms" ]; then
        ms=$(awk -v a="$(cat "$W/t_mv")" -v b="$t1" -v s="${settle[1]:-0}" 'BEGIN {printf "%.0f", (b - a) / 1e6 - s * 1000}')
        src=poll
        [ "$RECORD_MODE" = inplace ] && src="poll-minus-settle"
    fi
    echo "$ms $src ${sum:-?} $g0 $gap $sil $lost $miss/$n"
}
xxh_once() { # xxh_once FILE -> "MS SUM"
    local t s
    t=$(now_ns)
    s=$(xxhsum -H3 "$1" 2> /dev/null | awk '{print $NF}')
    echo "$(( ($(now_ns) - t) / 1000000 )) $s"
}
cached() { fincore -b -n -o RES,SIZE "$1" 2> /dev/null | awk '{if ($2 > 0) printf "%.0f%%", 100 * $1 / $2; else print "?"}'; }
evict() { python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"; }
# prepare FILE LABEL: the page-cache state each reader starts from
prepare() { if [ "$2" = sparse ]; then evict "$1"; else cat "$1" > /dev/null; fi; }

if { want a || want b; } && [ "$have_muster" = 1 ]; then
    if [ "$RECORD_MODE" = inplace ] && ! "$MUSTER_BIN" run --help 2>&1 | grep -q -- --checkpoint-settle; then
        log "RECORD_MODE=inplace needs a muster with --checkpoint-settle: muster figures are n/a"
        have_muster=0
    else
        server_start || have_muster=0
    fi
fi
row "# recorder timed with RECORD_MODE=$RECORD_MODE$([ "$RECORD_MODE" = inplace ] && echo ", --checkpoint-settle $CKPT_SETTLE subtracted")"
measure_file() { # measure_file FILE LABEL BYTES
    local file=$1 label=$2 bytes=$3 i r x mlist=() xlist=() glist=() g0list=() sillist=() misses=() lost=0
    local msum="" xsum="" srcs="" cache=()
    local who order
    for i in $(seq "$REPS"); do
        order="x m"
        [ $((i % 2)) = 0 ] && order="m x"
        for who in $order; do
            prepare "$file" "$label"
            cache+=("$who:$(cached "$file")")
            if [ "$who" = x ] && [ "$have_xxhsum" = 1 ]; then
                read -r x xsum < <(xxh_once "$file")
                xlist+=("$x")
            fi
            if [ "$who" = m ] && [ "$have_muster" = 1 ]; then
                r=$(record_once "$file" "$label$i")
                case $r in
                fail*) log "  $label run $i: muster $r" ;;
                *)
                    local r_ms r_src r_g0 r_g1 r_sil r_lost r_miss
                    read -r r_ms r_src msum r_g0 r_g1 r_sil r_lost r_miss <<< "$r"
                    mlist+=("$r_ms"); srcs=$r_src; g0list+=("$r_g0"); glist+=("$r_g1"); sillist+=("$r_sil")
                    [ "$r_lost" = 1 ] && lost=$((lost + 1))
                    misses+=("$r_miss") ;;
                esac
            fi
        done
        log "  $label run $i: xxhsum ${x:-n/a} ms, muster ${mlist[$((${#mlist[@]} - 1))]:-n/a} ms ($srcs), heartbeat_gap_max_ms before ${g0list[*]: -1} / during ${glist[*]: -1}, longest last_seen_ms_ago ${sillist[*]: -1}, samples without the node ${misses[*]: -1}; in page cache at the start ${cache[*]: -2}"
    done
    local mm xm
    mm=$(printf '%s\n' ${mlist[@]+"${mlist[@]}"} | median)
    xm=$(printf '%s\n' ${xlist[@]+"${xlist[@]}"} | median)
    local mr xr
    mr=$(mbs "$bytes" "$mm")
    xr=$(mbs "$bytes" "$xm")
    log "$label: muster ${mm} ms = ${mr} MB/s (runs ${mlist[*]:-}), xxhsum -H3 ${xm} ms = ${xr} MB/s (runs ${xlist[*]:-}); ratio $(pct "$mr" "$xr"); sums muster ${msum:-?} xxhsum ${xsum:-?}"
    row "(a) $label $(( bytes / 1073741824 )) GiB: muster ${mr} MB/s (${mm} ms, from the $srcs), xxhsum -H3 ${xr} MB/s (${xm} ms), muster/xxhsum $(pct "$mr" "$xr") (goal >= 90%); in page cache at each start ${cache[*]}"
    row "#   raw ms: muster ${mlist[*]:-}; xxhsum ${xlist[*]:-}; sums $([ -n "$msum" ] && [ "$msum" = "$xsum" ] && echo equal || echo "muster ${msum:-?} xxhsum ${xsum:-?}")"
    if [ "$label" = sparse ] && [ ${#mlist[@]} = 0 ]; then
        row "(b) heartbeat_gap_max_ms during the ${SPARSE_GB} GB record: not measured (no muster record)"
    elif [ "$label" = sparse ]; then
        row "(b) heartbeat_gap_max_ms during the ${SPARSE_GB} GB record: $(printf '%s\n' ${glist[@]+"${glist[@]}"} | median) ms median (runs ${glist[*]:-}; before the rename: ${g0list[*]:-}; heartbeats every 1000 ms); longest last_seen_ms_ago ${sillist[*]:-}; /status samples without the node ${misses[*]:-}; runs in which the agent logged 'rendezvous server lost': $lost of ${#mlist[@]}"
    fi
}
if want a || want b; then
    log "(a)/(b) sparse ${SPARSE_GB} GB"
    measure_file "$SPARSE" sparse "$(stat -c %s "$SPARSE")"
fi
if want a; then
    log "(a) real ${REAL_GB} GB in the page cache"
    measure_file "$REAL" real "$(stat -c %s "$REAL")"
fi
[ -n "$SRV_PID" ] && { kill "$SRV_PID" 2> /dev/null; wait "$SRV_PID" 2> /dev/null; }

# ------------------------------------------------------------------ (c) last-good copy
cat > "$W/copy.py" <<'EOP'
# copy.py METHOD SRC DST -> "CALL_MS FSYNC_MS" (FSYNC_MS: call + fsync of DST), or "n/a WHY"
import fcntl, os, sys, time
FICLONE = 0x40049409
method, src, dst = sys.argv[1:4]
fi = os.open(src, os.O_RDONLY)
fo = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
size = os.fstat(fi).st_size
t0 = time.perf_counter()
try:
    if method == "ficlone":
        fcntl.ioctl(fo, FICLONE, fi)
    elif method == "copy_file_range":
        off = 0
        while off < size:
            n = os.copy_file_range(fi, fo, min(size - off, 1 << 30), off, off)
            if n == 0:
                break
            off += n
    elif method == "readwrite":
        buf = bytearray(1 << 20)
        mv = memoryview(buf)
        while True:
            n = os.readv(fi, [buf])
            if n == 0:
                break
            os.write(fo, mv[:n])
    else:
        sys.exit("unknown method")
except OSError as e:
    print("n/a", e.strerror.replace(" ", "_"))
    sys.exit(0)
t1 = time.perf_counter()
os.fsync(fo)
t2 = time.perf_counter()
print(f"{(t1 - t0) * 1000:.1f} {(t2 - t0) * 1000:.1f}")
EOP
copy_cp() { # copy_cp MODE SRC DST -> "CALL_MS n/a" (cp does not fsync; sync after is timed apart)
    local t rc
    t=$(now_ns)
    cp --reflink="$1" "$2" "$3" 2> "$W/cp.err"
    rc=$?
    if [ $rc != 0 ]; then echo "n/a $(head -1 "$W/cp.err" | sed 's/.*: //; s/ /_/g')"; return; fi
    local t1
    t1=$(now_ns)
    sync -f "$3"
    echo "$(( (t1 - t) / 1000000 )) $(( ($(now_ns) - t) / 1000000 ))"
}
shared() { filefrag -v "$1" 2> /dev/null | grep -c shared; }

copy_fs() { # copy_fs LABEL DIR: the copies on the file system of DIR
    local label=$1 dir=$2 m i r a b calls durs note
    local src=$dir/src.bin dst=$dir/dst.bin
    cp --reflink=never "$REAL" "$src" && sync -f "$src"
    cat "$src" > /dev/null
    log "(c) $label ($(fstype "$dir")): ${REAL_GB} GB source in the page cache ($(cached "$src"))"
    for m in cp-always cp-never ficlone copy_file_range readwrite; do
        calls=() durs=() note=""
        for i in $(seq "$REPS"); do
            rm -f "$dst"
            sync -f "$dir" 2> /dev/null
            case $m in
            cp-always) r=$(copy_cp always "$src" "$dst") ;;
            cp-never) r=$(copy_cp never "$src" "$dst") ;;
            *) r=$(python3 "$W/copy.py" "$m" "$src" "$dst") ;;
            esac
            read -r a b <<< "$r"
            if [ "$a" = n/a ]; then note="not supported: $b"; break; fi
            calls+=("$a"); durs+=("$b")
            [ "$i" = 1 ] && note="shared extents $(shared "$dst"), $(cmp -s "$src" "$dst" && echo identical || echo DIFFERENT)"
        done
        local cm dm
        cm=$(printf '%s\n' ${calls[@]+"${calls[@]}"} | awk '{printf "%.0f\n", $1}' | median)
        dm=$(printf '%s\n' ${durs[@]+"${durs[@]}"} | awk '{printf "%.0f\n", $1}' | median)
        [ ${#calls[@]} = 0 ] && cm=n/a dm=n/a
        log "  $label $m: ${cm} ms to return, ${dm} ms with fsync/sync ($note; runs ${calls[*]:-} / ${durs[*]:-})"
        local rate
        rate="$(mbs "$(stat -c %s "$src")" "$dm") MB/s durable"
        case $note in *"shared extents 0"*) ;; *) rate="a clone, no bytes copied" ;; esac
        [ "$cm" = n/a ] && rate="n/a"
        row "(c) $label $m: ${cm} ms, durable ${dm} ms, $rate ($note)"
    done
    rm -f "$src" "$dst"
}

if want c; then
    copy_fs "native-$(fstype "$W")" "$W"
    for fs in $FS; do
        mk=mkfs.$fs
        if ! command -v "$mk" > /dev/null 2>&1; then
            pkg=$fs-progs
            [ "$fs" = xfs ] && pkg=xfsprogs
            log "(c) $fs: $mk not installed (apt-get install $pkg): skipped"
            row "(c) $fs: not measured ($mk missing)"
            continue
        fi
        img=$W/$fs.img mnt=$W/mnt_$fs
        truncate -s "${IMG_GB}G" "$img"
        if ! loop=$(losetup -f --show "$img" 2> "$W/losetup.err"); then
            log "(c) $fs: loop devices do not work here ($(head -1 "$W/losetup.err")): skipped"
            row "(c) $fs: not measured (loop devices do not work here: $(head -1 "$W/losetup.err"))"
            rm -f "$img"
            continue
        fi
        LOOPS="$LOOPS $loop"
        case $fs in
        xfs) opts=(-q -f -m reflink=1) ;;
        btrfs) opts=(-q -f) ;;
        *) opts=(-q) ;;
        esac
        if ! "$mk" "${opts[@]}" "$loop" > "$W/mkfs.err" 2>&1; then
            log "(c) $fs: $mk failed: $(head -1 "$W/mkfs.err")"
            row "(c) $fs: not measured ($mk failed)"
            continue
        fi
        mkdir -p "$mnt"
        if ! mount "$loop" "$mnt" 2> "$W/mount.err"; then
            log "(c) $fs: mount failed: $(head -1 "$W/mount.err")"
            row "(c) $fs: not measured (mount failed: $(head -1 "$W/mount.err"))"
            continue
        fi
        MOUNTS="$mnt $MOUNTS"
        copy_fs "$fs-loop" "$mnt"
        umount "$mnt" && MOUNTS=${MOUNTS/$mnt /}
        losetup -d "$loop" && LOOPS=${LOOPS/ $loop/}
        rm -f "$img"
    done
fi

log "done; load $(cut -d' ' -f1-3 /proc/loadavg)"
row "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$RES"
[ -n "$OUTFILE" ] && cp "$RES" "$OUTFILE"
exit 0
