"""Minimal line-oriented reader for XLA HLO text, enough for the golden-value scripts.

It understands what XLA prints (jax `as_text(dialect="hlo")`, compiled `as_text()`, PyTorch/XLA dumps):
one instruction per line, `[ROOT] [%]name = shape opcode(operands), attr=value, ...`, computations
`[ENTRY] [%]name [(sig) -> shape] {` ... `}`, and the FileNames/FunctionNames/FileLocations/StackFrames
tables that newer XLA prints between the header and the first computation. It is not a validator: the C
parser is the real one; this only has to pull out names, shapes, opcodes and attributes.
"""

import re

_NAME_RE = re.compile(r'\s*(ROOT\s+)?%?([A-Za-z_][\w.\-]*)\s*=\s*')
_OPCODE_RE = re.compile(r'\s*([a-z][a-z0-9\-]*)\(')
_COMP_RE = re.compile(r'^\s*(ENTRY\s+)?%?([A-Za-z_][\w.\-]*)\s*(\(.*\)\s*->\s*.*)?\{\s*$')
_ARRAY_SHAPE_RE = re.compile(r'^([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?$')


def _match_close(s, i):
    """s[i] is an opening bracket; return the index just past its matching close.

    Handles (), {}, [], "strings" and /*comments*/."""
    pairs = {'(': ')', '{': '}', '[': ']'}
    stack = []
    n = len(s)
    while i < n:
        c = s[i]
        if c == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == '\\' else 1
        elif s.startswith('/*', i):
            j = s.find('*/', i + 2)
            i = n - 1 if j < 0 else j + 1
        elif c in pairs:
            stack.append(pairs[c])
        elif c in ')}]':
            if not stack or stack[-1] != c:
                raise ValueError('unbalanced %r at %d in %r' % (c, i, s[:200]))
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    raise ValueError('unterminated bracket in %r' % s[:200])


def split_top(s, sep=','):
    """Split s at top-level separators (not inside brackets, strings or comments)."""
    out, depth, cur, i, n = [], 0, [], 0, len(s)
    while i < n:
        c = s[i]
        if c == '"':
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == '\\' else 1
            cur.append(s[i:j + 1])
            i = j + 1
            continue
        if s.startswith('/*', i):
            j = s.find('*/', i + 2)
            j = n if j < 0 else j + 2
            cur.append(s[i:j])
            i = j
            continue
        if c in '({[':
            depth += 1
        elif c in ')}]':
            depth -= 1
        if c == sep and depth == 0:
            out.append(''.join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    if ''.join(cur).strip():
        out.append(''.join(cur))
    return [x.strip() for x in out]


def strip_comments(s):
    return re.sub(r'/\*.*?\*/', '', s)


class Instr:
    __slots__ = ('line_no', 'is_root', 'name', 'shape', 'opcode', 'operands_text', 'operands',
                 'attrs', 'attrs_text', 'prefix')

    def __repr__(self):
        return 'Instr(%s = %s %s(%s))' % (self.name, self.shape, self.opcode, ', '.join(self.operands))


def parse_instruction(line, line_no=0):
    """Parse one instruction line; return Instr or None when the line is not an instruction."""
    m = _NAME_RE.match(line)
    if not m:
        return None
    i = m.end()
    if i < len(line) and line[i] == '(':
        j = _match_close(line, i)
        shape = line[i:j]
    else:
        j = i
        while j < len(line) and not line[j].isspace():
            j += 1
        shape = line[i:j]
    m2 = _OPCODE_RE.match(line, j)
    if not m2:
        return None
    ins = Instr()
    ins.line_no = line_no
    ins.prefix = line[:m.start(2)]
    ins.is_root = bool(m.group(1))
    ins.name = m.group(2)
    ins.shape = shape
    ins.opcode = m2.group(1)
    p0 = m2.end() - 1
    p1 = _match_close(line, p0)
    ins.operands_text = line[p0 + 1:p1 - 1]
    if ins.opcode == 'constant':
        ins.operands = []
    else:
        ins.operands = []
        for item in split_top(ins.operands_text):
            item = strip_comments(item).strip()
            if item:
                ins.operands.append(item.split()[-1].lstrip('%'))
    rest = line[p1:].strip()
    if rest.startswith(','):
        rest = rest[1:].strip()
    ins.attrs_text = rest
    ins.attrs = {}
    for kv in split_top(rest):
        if '=' in kv:
            k, v = kv.split('=', 1)
            ins.attrs[k.strip()] = v.strip()
    return ins


class Computation:
    def __init__(self, name, is_entry, header_line):
        self.name = name
        self.is_entry = is_entry
        self.header_line = header_line
        self.instrs = []

    def by_name(self):
        return {i.name: i for i in self.instrs}

    def root(self):
        for i in self.instrs:
            if i.is_root:
                return i
        return self.instrs[-1]


class Module:
    """Parsed view of HLO text; `lines` keeps the original text line by line."""

    def __init__(self, text):
        self.text = text
        self.lines = text.split('\n')
        self.header = self.lines[0] if self.lines else ''
        self.computations = []
        cur = None
        for no, line in enumerate(self.lines):
            if cur is None:
                m = _COMP_RE.match(line)
                if m and not line.startswith('HloModule'):
                    cur = Computation(m.group(2), bool(m.group(1)), no)
                continue
            if line.strip() == '}':
                self.computations.append(cur)
                cur = None
                continue
            ins = parse_instruction(line, no)
            if ins is not None:
                cur.instrs.append(ins)
        if cur is not None:
            raise ValueError('unterminated computation %s' % cur.name)

    def entry(self):
        for c in self.computations:
            if c.is_entry:
                return c
        return self.computations[-1]

    def opcodes(self):
        return sorted({i.opcode for c in self.computations for i in c.instrs})

    def all_names(self):
        return {i.name for c in self.computations for i in c.instrs} | {c.name for c in self.computations}

    def entry_parameters(self):
        """Entry parameters ordered by parameter number: list of (name, shape string)."""
        ps = []
        for i in self.entry().instrs:
            if i.opcode == 'parameter':
                ps.append((int(i.operands_text), i.name, i.shape))
        ps.sort()
        return [(n, s) for _, n, s in ps]


def parse_shape(shape):
    """'f32[3,4]{1,0}' -> ('f32', (3, 4), (1, 0) or None).  Tuples -> ('tuple', [subshapes])."""
    shape = strip_comments(shape).strip()
    if shape.startswith('('):
        inner = shape[1:-1]
        return ('tuple', [parse_shape(x) for x in split_top(inner)])
    m = _ARRAY_SHAPE_RE.match(shape)
    if not m:
        raise ValueError('cannot parse shape %r' % shape)
    dims = tuple(int(d.lstrip('<=')) for d in m.group(2).split(',') if d.strip())
    layout = None
    if m.group(3):
        lay = m.group(3)[1:-1].split(':')[0]
        layout = tuple(int(x) for x in lay.split(',') if x.strip())
    return (m.group(1), dims, layout)


def flatten_shape(shape):
    """List of (dtype, dims) leaves of a possibly-tuple shape, in order."""
    p = parse_shape(shape) if isinstance(shape, str) else shape
    if p[0] == 'tuple':
        out = []
        for s in p[1]:
            out.extend(flatten_shape(s))
        return out
    return [(p[0], p[1])]


def element_type(shape):
    p = parse_shape(shape)
    return p[0]
