#!/usr/bin/env python3
"""Reads a topic back with Confluent's Python client, as a consumer the coordinator's authors
did not write would: test/records_readback_test.go runs it and compares what it prints with
what it sent.

    read.py --bootstrap HOST:PORT --registry URL [--timeout S] TOPIC:KEYFMT:VALUEFMT:COUNT ...

Each TOPIC is read from the beginning of every partition with isolation.level=read_committed
until COUNT records arrived (or --timeout seconds passed: exit status 2). Key and value are
deserialized by their format:

    avro        confluent_kafka's AvroDeserializer (fastavro), writer schema by the record's id
    jsonschema  JSONDeserializer (validates with jsonschema), writer schema by the record's id
    protobuf    ProtobufDeserializer, see below
    json        json.loads
    string      UTF-8 text
    bytes       the raw bytes

One JSON line per record: topic, partition, offset, key, value, headers ([name, base64 or
null] in order), key_schema_id / value_schema_id (the ids of the Confluent framing, read with
the client's own SchemaId) and, for Protobuf, key_message / value_message (the message the
framing's indexes name). Bytes inside a key or value print as {"$bytes": base64}; a Protobuf
message prints as protobuf's canonical JSON mapping (MessageToDict, field names as declared).
A record that does not deserialize prints {"topic", "partition", "offset", "error"} instead.

Protobuf: ProtobufDeserializer needs the message's generated Python class, and fetches the
writer schema and every schema it references with ?format=serialized, where Confluent's registry answers a base64
FileDescriptorProto. Apicurio Registry ignores that parameter and answers the .proto text,
which the deserializer cannot read. So, with nothing generated ahead of time:
  - the registry client below answers format=serialized itself when the registry did not: it
    compiles the text with protoc (grpcio-tools), its references written beside it under their
    import paths, and hands the deserializer the base64 FileDescriptorProto Confluent's
    registry would have sent (for the record's schema and for each referenced one);
  - the message class is built at run time (message_factory.GetMessageClass) from that same
    compiled descriptor, choosing the message by the indexes in the record's framing, and the
    deserializer is made once per (schema id, indexes) with it.
The framing, the indexes' resolution against the writer schema and the parsing stay the
client's own.
"""
import argparse
import base64
import binascii
import datetime
import decimal
import json
import os
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.schema_registry import RegisteredSchema, SchemaRegistryClient, Schema, dual_schema_id_deserializer
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

try:
    from confluent_kafka.schema_registry.common.serde import SchemaId
except ImportError:  # older layouts
    from confluent_kafka.schema_registry.serde import SchemaId

FORMATS = ("avro", "jsonschema", "protobuf", "json", "string", "bytes")


def compile_proto(text, imports=None):
    """Compiles .proto text with protoc (grpcio-tools): a FileDescriptorSet, imports included.
    imports maps an import path to the text of the file (the schema's references)."""
    import importlib.resources
    from grpc_tools import protoc

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "kpgtx-reader-schema.proto")
        out = os.path.join(d, "out.pb")
        with open(src, "w") as f:
            f.write(text)
        for path, body in (imports or {}).items():
            full = os.path.join(d, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(body)
        rc = protoc.main(["protoc", "-I" + d, "-I" + include, "--include_imports",
                          "--descriptor_set_out=" + out, src])
        if rc != 0:
            raise ValueError("protoc could not compile the registry's schema (exit %d)" % rc)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds


def is_serialized_descriptor(s):
    try:
        raw = base64.b64decode(s.encode("ascii"), validate=True)
        descriptor_pb2.FileDescriptorProto().ParseFromString(raw)
        return True
    except (binascii.Error, UnicodeEncodeError, ValueError, Exception):
        return False


class Registry(SchemaRegistryClient):
    """Confluent's client, answering format=serialized for Protobuf when the registry did not
    (module docstring)."""

    def __init__(self, conf):
        super().__init__(conf)
        self.compiled = {}  # schema id -> FileDescriptorSet
        self.bridged = False

    def descriptor_set(self, schema_id):
        if schema_id not in self.compiled:
            s = super().get_schema(schema_id)
            if s.schema_type != "PROTOBUF":
                raise ValueError("schema %d is %s, not PROTOBUF" % (schema_id, s.schema_type))
            self.compiled[schema_id] = compile_proto(s.schema_str, self.referenced(s.references))
        return self.compiled[schema_id]

    def referenced(self, refs, out=None):
        """The texts of the references, recursively, by import path (well-known types are
        protoc's own)."""
        out = {} if out is None else out
        for r in refs or []:
            if r.name in out or r.name.startswith("google/protobuf/"):
                continue
            rs = super().get_version(r.subject, r.version).schema
            out[r.name] = rs.schema_str
            self.referenced(rs.references, out)
        return out

    def get_version(self, subject_name, version="latest", deleted=False, fmt=None):
        """A referenced Protobuf schema, asked for serialized by the deserializer, compiled here
        as get_schema does for the record's own."""
        rs = super().get_version(subject_name, version, deleted, fmt)
        if fmt == "serialized" and rs.schema.schema_type == "PROTOBUF" and not is_serialized_descriptor(rs.schema.schema_str):
            self.bridged = True
            fd = compile_proto(rs.schema.schema_str, self.referenced(rs.schema.references)).file[-1]
            return RegisteredSchema(schema_id=rs.schema_id, guid=rs.guid, subject=rs.subject, version=rs.version,
                                    schema=Schema(base64.standard_b64encode(fd.SerializeToString()).decode("ascii"),
                                                  "PROTOBUF", rs.schema.references))
        return rs

    def get_schema(self, schema_id, subject_name=None, fmt=None, reference_format=None):
        s = super().get_schema(schema_id, subject_name, fmt, reference_format)
        if fmt == "serialized" and s.schema_type == "PROTOBUF" and not is_serialized_descriptor(s.schema_str):
            self.bridged = True
            fd = self.descriptor_set(schema_id).file[-1]  # the schema's own file, after its imports
            return Schema(base64.standard_b64encode(fd.SerializeToString()).decode("ascii"),
                          "PROTOBUF", s.references)
        return s


def message_name(fd, indexes):
    """The full name of the message the framing's indexes name (Confluent's rule)."""
    msgs, name = fd.message_type, fd.package
    for i in indexes:
        m = msgs[i]
        name = name + "." + m.name if name else m.name
        msgs = m.nested_type
    return name


def plain(v):
    """v as JSON: bytes as {"$bytes": base64}; the logical values the Avro deserializer gives
    as {"$decimal": "12.50"}, {"$datetime": ISO 8601}, {"$date": …}, {"$time": …}, a UUID as
    its string."""
    if isinstance(v, (bytes, bytearray)):
        return {"$bytes": base64.standard_b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, decimal.Decimal):
        return {"$decimal": str(v)}
    if isinstance(v, datetime.datetime):
        return {"$datetime": v.isoformat()}
    if isinstance(v, datetime.date):
        return {"$date": v.isoformat()}
    if isinstance(v, datetime.time):
        return {"$time": v.isoformat()}
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


class Reader:
    def __init__(self, registry_url):
        self.registry = Registry({"url": registry_url}) if registry_url else None
        self.avro = AvroDeserializer(self.registry) if self.registry else None
        self.jsonschema = JSONDeserializer(None, schema_registry_client=self.registry) if self.registry else None
        self.protobuf = {}  # (schema id, indexes) -> (ProtobufDeserializer, message name)

    def decode(self, fmt, data, ctx, out, side):
        if data is None:
            out[side] = None
            return
        if fmt == "string":
            out[side] = data.decode("utf-8")
        elif fmt == "bytes":
            out[side] = plain(data)
        elif fmt == "json":
            out[side] = json.loads(data)
        elif fmt in ("avro", "jsonschema", "protobuf"):
            if self.registry is None:
                raise ValueError("--registry is needed for " + fmt)
            sid = SchemaId(fmt.upper() if fmt != "jsonschema" else "JSON")
            dual_schema_id_deserializer(data, ctx, sid)
            out[side + "_schema_id"] = sid.id
            if fmt == "avro":
                out[side] = plain(self.avro(data, ctx))
            elif fmt == "jsonschema":
                out[side] = plain(self.jsonschema(data, ctx))
            else:
                key = (sid.id, tuple(sid.message_indexes))
                if key not in self.protobuf:
                    fds = self.registry.descriptor_set(sid.id)
                    pool = descriptor_pool.DescriptorPool()
                    for f in fds.file:
                        pool.Add(f)
                    name = message_name(fds.file[-1], sid.message_indexes)
                    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
                    self.protobuf[key] = (ProtobufDeserializer(cls, {"use.deprecated.format": False},
                                                               schema_registry_client=self.registry), name)
                des, name = self.protobuf[key]
                msg = des(data, ctx)
                out[side + "_message"] = name
                out[side] = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        else:
            raise ValueError("unknown format " + fmt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--registry", default="")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("specs", nargs="+", metavar="TOPIC:KEYFMT:VALUEFMT:COUNT")
    a = ap.parse_args()

    specs = {}
    for s in a.specs:
        topic, kf, vf, n = s.rsplit(":", 3)
        for f in (kf, vf):
            if f not in FORMATS:
                ap.error("format %r: one of %s" % (f, ", ".join(FORMATS)))
        specs[topic] = (kf, vf, int(n))

    reader = Reader(a.registry)
    consumer = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": "kpgtx-reader-" + uuid.uuid4().hex,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    deadline = time.monotonic() + a.timeout
    assignment = []
    for topic in specs:
        md = consumer.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            print("topic %s: %s" % (topic, t.error if t else "not found"), file=sys.stderr)
            return 1
        assignment += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(t.partitions)]
    consumer.assign(assignment)

    got = {t: 0 for t in specs}
    try:
        while any(got[t] < specs[t][2] for t in specs):
            left = deadline - time.monotonic()
            if left <= 0:
                print("timed out: read %s, expected %s" % (got, {t: s[2] for t, s in specs.items()}),
                      file=sys.stderr)
                return 2
            m = consumer.poll(min(left, 1.0))
            if m is None:
                continue
            if m.error():
                print("consumer error: %s" % m.error(), file=sys.stderr)
                continue
            topic = m.topic()
            if topic not in specs:
                continue
            kf, vf, _ = specs[topic]
            got[topic] += 1
            out = {"topic": topic, "partition": m.partition(), "offset": m.offset()}
            headers = m.headers() or []
            try:
                reader.decode(kf, m.key(), SerializationContext(topic, MessageField.KEY, headers), out, "key")
                reader.decode(vf, m.value(), SerializationContext(topic, MessageField.VALUE, headers), out, "value")
                out["headers"] = [[h, None if v is None else base64.standard_b64encode(v).decode("ascii")]
                                  for h, v in headers]
            except Exception as e:  # reported per record, so the test names what failed
                out = {"topic": topic, "partition": m.partition(), "offset": m.offset(),
                       "error": "%s: %s" % (type(e).__name__, e)}
            print(json.dumps(out, sort_keys=True), flush=True)
    finally:
        consumer.close()
    if reader.registry is not None and reader.registry.bridged:
        print("note: the registry answered ?format=serialized with .proto text; compiled it here",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
