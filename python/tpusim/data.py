"""The dataset formats `tpusim train` reads (docs/step_dir.md, "Datasets"): writers, readers and the example
order of an epoch.

Two formats, each a set of named arrays whose first dimension is the example:
  * a directory of .npz shards (`shard-00000.npz`, ...; read in name order, concatenated),
  * the cached format: one or more `.tpuds` files, a fixed little-endian header and one contiguous,
    page-aligned array per name, so a reader can mmap the file and copy example i of an array from
    offset + i * example_bytes.
"""

import os
import struct

import numpy as np

MAGIC = b"TPUSIMDS"
VERSION = 1
HEADER_BYTES = 64
ENTRY_BYTES = 128
MAX_ARRAYS = 64
MAX_RANK = 6
NAME_BYTES = 48
DTYPE_BYTES = 8
ALIGN = 4096

# HLO element type names <-> numpy dtypes the trainer supports in datasets
DTYPES = {
    "pred": np.dtype(np.bool_), "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64), "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64), "f16": np.dtype(np.float16), "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}
try:  # bf16 arrays need ml_dtypes (installed with jax)
    import ml_dtypes
    DTYPES["bf16"] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    pass


def hlo_dtype(dt):
    dt = np.dtype(dt)
    for k, v in DTYPES.items():
        if v == dt:
            return k
    raise ValueError("dtype %s has no HLO element type tpusim datasets support" % dt)


def _check_arrays(arrays):
    if not arrays:
        raise ValueError("a dataset needs at least one array")
    n = None
    out = {}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        hlo_dtype(a.dtype)
        if a.ndim < 1:
            raise ValueError("array %r: needs a first (example) dimension" % name)
        if n is None:
            n = a.shape[0]
        elif a.shape[0] != n:
            raise ValueError("array %r has %d examples, the others %d" % (name, a.shape[0], n))
        out[name] = a
    return out, n


# ---- npz shards ------------------------------------------------------------------------------------------

def write_npz_shards(out_dir, arrays, num_shards=1, compress=False):
    """Splits `arrays` (name -> array, first dim = examples) into num_shards .npz files of near-equal size,
    out_dir/shard-00000.npz ... Returns the paths."""
    arrays, n = _check_arrays(arrays)
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):   # stale shards from an earlier write would be read too
        if f.endswith(".npz"):
            os.remove(os.path.join(out_dir, f))
    bounds = np.linspace(0, n, num_shards + 1).round().astype(int)
    paths = []
    for s in range(num_shards):
        path = os.path.join(out_dir, "shard-%05d.npz" % s)
        part = {k: a[bounds[s]:bounds[s + 1]] for k, a in arrays.items()}
        (np.savez_compressed if compress else np.savez)(path, **part)
        paths.append(path)
    return paths


# ---- cached format (.tpuds) ------------------------------------------------------------------------------

def _round_up(x, a):
    return (x + a - 1) // a * a


def write_cached(path, arrays):
    """Writes `arrays` (name -> array, first dim = examples) as one .tpuds file. Returns the path."""
    arrays, n = _check_arrays(arrays)
    if len(arrays) > MAX_ARRAYS:
        raise ValueError("at most %d arrays in a .tpuds file" % MAX_ARRAYS)
    entries, offset = [], _round_up(HEADER_BYTES + ENTRY_BYTES * len(arrays), ALIGN)
    for name, a in arrays.items():
        nb = name.encode("utf-8")
        if not nb or len(nb) >= NAME_BYTES or b"\0" in nb:
            raise ValueError("array name %r: 1..%d bytes of UTF-8, no NUL" % (name, NAME_BYTES - 1))
        if a.ndim - 1 > MAX_RANK:
            raise ValueError("array %r: at most %d dimensions per example" % (name, MAX_RANK))
        dims = list(a.shape[1:]) + [0] * (MAX_RANK - (a.ndim - 1))
        entry = struct.pack("<%ds%dsII%dqQQ" % (NAME_BYTES, DTYPE_BYTES, MAX_RANK),
                            nb, hlo_dtype(a.dtype).encode(), a.ndim - 1, 0, *dims, offset, a.nbytes)
        assert len(entry) == ENTRY_BYTES
        entries.append((entry, offset, a))
        offset = _round_up(offset + a.nbytes, ALIGN)
    file_size = entries[-1][1] + entries[-1][2].nbytes
    header = struct.pack("<8sIIQQQ24x", MAGIC, VERSION, len(arrays), n,
                         _round_up(HEADER_BYTES + ENTRY_BYTES * len(arrays), ALIGN), file_size)
    assert len(header) == HEADER_BYTES
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        for e, _, _ in entries:
            f.write(e)
        for _, off, a in entries:
            f.write(b"\0" * (off - f.tell()))
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    os.replace(tmp, path)
    return path


def read_cached(path, mmap=True):
    """name -> array (read-only memory maps when mmap) of one .tpuds file, with the format's checks."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES or head[:8] != MAGIC:
            raise ValueError("%s: not a tpusim cached dataset (magic %r)" % (path, head[:8]))
        _, version, narrays, n, header_size, file_size = struct.unpack("<8sIIQQQ24x", head)
        if version != VERSION:
            raise ValueError("%s: version %d, this reader knows %d" % (path, version, VERSION))
        if not 1 <= narrays <= MAX_ARRAYS or file_size != size:
            raise ValueError("%s: %d arrays, file_size %d (file has %d bytes)" % (path, narrays, file_size, size))
        table = f.read(ENTRY_BYTES * narrays)
    out = {}
    for k in range(narrays):
        fields = struct.unpack_from("<%ds%dsII%dqQQ" % (NAME_BYTES, DTYPE_BYTES, MAX_RANK), table, k * ENTRY_BYTES)
        name = fields[0].rstrip(b"\0").decode()
        dt = DTYPES[fields[1].rstrip(b"\0").decode()]
        rank = fields[2]
        dims = tuple(fields[4:4 + rank])
        offset, nbytes = fields[4 + MAX_RANK], fields[5 + MAX_RANK]
        if nbytes != n * int(np.prod(dims, dtype=np.int64)) * dt.itemsize or offset + nbytes > size:
            raise ValueError("%s: array %r: %d bytes at %d do not fit %d examples of %s %s"
                             % (path, name, nbytes, offset, n, dt, dims))
        shape = (n,) + dims
        if mmap:
            out[name] = np.memmap(path, dtype=dt.newbyteorder("<"), mode="r", offset=offset, shape=shape)
        else:
            with open(path, "rb") as f:
                f.seek(offset)
                out[name] = np.frombuffer(f.read(nbytes), dtype=dt.newbyteorder("<")).reshape(shape)
    return out


# ---- reading either format ---------------------------------------------------------------------------------

def dataset_files(path):
    """The files of a dataset path: a .tpuds file, or a directory of .npz shards or of .tpuds files."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError("dataset %s: no such file or directory" % path)
    names = sorted(os.listdir(path))
    npz = [os.path.join(path, f) for f in names if f.endswith(".npz")]
    tds = [os.path.join(path, f) for f in names if f.endswith(".tpuds")]
    if npz and tds:
        raise ValueError("dataset %s mixes .npz shards and .tpuds files" % path)
    if not npz and not tds:
        raise ValueError("dataset %s holds no .npz shards or .tpuds files" % path)
    return npz or tds


def read_dataset(path):
    """name -> array of a whole dataset (shards concatenated in file-name order)."""
    parts = []
    for f in dataset_files(path):
        if f.endswith(".npz"):
            with np.load(f) as z:
                parts.append({k: z[k] for k in z.files})
        else:
            parts.append(read_cached(f, mmap=False))
    names = list(parts[0])
    for p in parts[1:]:
        if sorted(p) != sorted(names):
            raise ValueError("dataset %s: shards hold different arrays (%s vs %s)" % (path, names, list(p)))
    return {k: np.concatenate([p[k] for p in parts]) for k in names}


# ---- example order ---------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & _M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return state, z ^ (z >> 31)


def epoch_order(n, seed, epoch, shuffle=True):
    """The order of the n examples in `epoch` (0-based): identity without shuffle, else a Fisher-Yates
    shuffle driven by splitmix64 from the state seed * 1000003 + epoch (docs/step_dir.md, "Order")."""
    perm = np.arange(n, dtype=np.int64)
    if not shuffle:
        return perm
    state = (seed * 1000003 + epoch) & _M64
    for i in range(n - 1, 0, -1):
        state, r = _splitmix64(state)
        j = r % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def train_batches(n, per_replica, replicas, seed=0, shuffle=True, start_step=0):
    """Yields (step, epoch, [index array of each replica]) forever, as the trainer feeds them: global batch
    G = replicas * per_replica, floor(n / G) steps per epoch (the remainder is dropped), replica r takes
    positions [r * per_replica, (r + 1) * per_replica) of each global batch."""
    g = per_replica * replicas
    per_epoch = n // g
    if per_epoch < 1:
        raise ValueError("%d examples make no global batch of %d (%d x %d)" % (n, g, replicas, per_replica))
    step = start_step
    order, order_epoch = None, -1
    while True:
        epoch, k = divmod(step, per_epoch)
        if epoch != order_epoch:
            order, order_epoch = epoch_order(n, seed, epoch, shuffle), epoch
        base = k * g
        yield step, epoch, [order[base + r * per_replica: base + (r + 1) * per_replica] for r in range(replicas)]
        step += 1


def eval_batches(n, per_replica, replicas):
    """Yields lists (one per replica) of (index array, valid count): the examples in order, a global batch at a
    time; the last one padded (valid < per_replica; padded rows are zeros with mask 0)."""
    g = per_replica * replicas
    for base in range(0, n, g):
        out = []
        for r in range(replicas):
            lo = min(base + r * per_replica, n)
            hi = min(lo + per_replica, n)
            out.append((np.arange(lo, hi), hi - lo))
        yield out


def gather(arrays, idx, rows=None):
    """Rows idx of each array, zero-padded to `rows` rows."""
    out = {}
    for k, a in arrays.items():
        x = np.asarray(a[idx])
        if rows is not None and x.shape[0] < rows:
            x = np.concatenate([x, np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)])
        out[k] = x
    return out
