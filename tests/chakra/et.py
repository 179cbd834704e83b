"""A small, independent reader and writer of Chakra execution-trace files for the tests.

It encodes the protobuf wire format by hand from the field numbers of Chakra's published
schema (schema/protobuf/et_def.proto), without dlsim's generated code: a file dlsim writes that
this module reads, and a file this module writes that dlsim reads, agree on the schema itself.
A file is a sequence of records, each a base-128 varint length and a message: GlobalMetadata,
then Nodes.
"""
import struct

# NodeType and CollectiveCommType, as numbered in the schema
METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
ALL_REDUCE, REDUCE, ALL_GATHER, GATHER, SCATTER, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER = range(8)
REDUCE_SCATTER_BLOCK, BARRIER = 8, 9

# AttributeProto's value members: field number -> (name, wire type)
ATTR_FIELDS = {3: "double_val", 4: "double_list", 5: "float_val", 7: "int32_val",
               9: "int64_val", 11: "uint32_val", 13: "uint64_val", 15: "sint32_val",
               17: "sint64_val", 27: "bool_val", 29: "string_val"}


# ---- encoding ------------------------------------------------------------------------------

def varint(n):
    if n < 0:
        n += 1 << 64  # int64 negatives: ten bytes, two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_varint(field, n):
    return key(field, 0) + varint(n)


def f_bytes(field, data):
    return key(field, 2) + varint(len(data)) + data


def f_str(field, s):
    return f_bytes(field, s.encode())


def f_double(field, x):
    return key(field, 1) + struct.pack("<d", x)


def attr(name, value):
    """An AttributeProto with the member Chakra's writers use for each Python type."""
    body = f_str(1, name)
    if isinstance(value, bool):
        body += f_varint(27, int(value))
    elif isinstance(value, int):
        body += f_varint(9, value)  # int64_val
    elif isinstance(value, float):
        body += f_double(3, value)
    elif isinstance(value, str):
        body += f_str(29, value)
    elif isinstance(value, list):
        body += f_bytes(4, b"".join(f_double(1, float(v)) for v in value))
    else:
        raise TypeError(value)
    return body


def node(id, name, type, ctrl=(), data=(), duration_us=0, attrs=None, inputs_values=None):
    body = f_varint(1, id) + f_str(2, name) + f_varint(3, type)
    if ctrl:
        body += f_bytes(4, b"".join(varint(d) for d in ctrl))
    if data:
        body += f_bytes(5, b"".join(varint(d) for d in data))
    if duration_us:
        body += f_varint(7, duration_us)
    if inputs_values is not None:
        body += f_bytes(8, f_str(1, inputs_values))  # IOInfo.values
    for k, v in (attrs or {}).items():
        body += f_bytes(10, attr(k, v))
    return body


def metadata(version="0.0.4", attrs=None):
    body = f_str(1, version)
    for k, v in (attrs or {}).items():
        body += f_bytes(2, attr(k, v))
    return body


def write(path, nodes, meta=None):
    """nodes: node() messages. meta: metadata() message (default: version 0.0.4, no attributes)."""
    with open(path, "wb") as f:
        for msg in [meta if meta is not None else metadata()] + list(nodes):
            f.write(varint(len(msg)) + msg)


# ---- decoding ------------------------------------------------------------------------------

def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def fields(buf):
    """(field number, wire type, value) of a message: ints, bytes, or 8-byte floats."""
    i, out = 0, []
    while i < len(buf):
        k, i = read_varint(buf, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = read_varint(buf, i)
        elif w == 1:
            v, i = struct.unpack("<d", buf[i:i + 8])[0], i + 8
        elif w == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif w == 5:
            v, i = struct.unpack("<f", buf[i:i + 4])[0], i + 4
        else:
            raise ValueError("wire type %d" % w)
        out.append((f, w, v))
    return out


def decode_attr(buf):
    name, value, member = None, None, None
    for f, w, v in fields(buf):
        if f == 1:
            name = v.decode()
        elif f in ATTR_FIELDS:
            member = ATTR_FIELDS[f]
            if member == "string_val":
                value = v.decode()
            elif member == "double_list":
                value = [x for _, _, x in fields(v)]
            elif member in ("int64_val", "int32_val") and v >= 1 << 63:
                value = v - (1 << 64)
            else:
                value = v
        else:
            raise ValueError("attribute field %d is not in the schema" % f)
    return name, member, value


def packed(v):
    out, i = [], 0
    while i < len(v):
        x, i = read_varint(v, i)
        out.append(x)
    return out


def decode_node(buf):
    # proto3 leaves out fields at their default (id 0, ...)
    n = {"id": 0, "name": "", "type": 0, "ctrl_deps": [], "data_deps": [], "attr": {},
         "members": {}, "duration_micros": 0}
    for f, w, v in fields(buf):
        if f == 1:
            n["id"] = v
        elif f == 2:
            n["name"] = v.decode()
        elif f == 3:
            n["type"] = v
        elif f in (4, 5):
            n["ctrl_deps" if f == 4 else "data_deps"] += packed(v) if w == 2 else [v]
        elif f == 7:
            n["duration_micros"] = v
        elif f == 10:
            name, member, value = decode_attr(v)
            n["attr"][name] = value
            n["members"][name] = member
        elif f not in (6, 8, 9):
            raise ValueError("node field %d is not in the schema" % f)
    return n


def read(path):
    """(metadata {version, attr}, [nodes])."""
    data = open(path, "rb").read()
    i, records = 0, []
    while i < len(data):
        n, i = read_varint(data, i)
        records.append(data[i:i + n])
        i += n
    meta = {"version": "", "attr": {}}
    for f, w, v in fields(records[0]):
        if f == 1:
            meta["version"] = v.decode()
        elif f == 2:
            name, _, value = decode_attr(v)
            meta["attr"][name] = value
    return meta, [decode_node(r) for r in records[1:]]
