// Package registry encodes JSON values in the Confluent Schema Registry wire format against
// schemas held by a registry that speaks Confluent's REST API (Confluent Schema Registry,
// Apicurio Registry at /apis/ccompat/v7, Karapace, Redpanda).
//
// # What it provides
//
// An Encoder turns one JSON value into the bytes a Kafka record carries for a schema named by
// id, or by subject and version (0 = latest):
//
//	0x00 | schema id (4 bytes, big-endian) | [Protobuf: message indexes] | payload
//
// The header, with Protobuf's message indexes (zig-zag varints, [0] written as one 0 byte),
// is franz-go's sr.ConfluentHeader. The data is checked against the schema before anything
// is returned, each format with a maintained library and never a hand-written encoder:
//
//   - Avro: github.com/linkedin/goavro/v2. The data is Avro's JSON encoding, the form
//     Confluent's REST Proxy takes: a union value is {"type": value} (or null), bytes and
//     fixed are strings of code points, missing fields take their defaults. Numbers are
//     checked as written first (avronumbers.go): an int or a long is an integer without
//     fraction or exponent within its range, a float or a double a number within its range
//     and not null; never rounded through a float64. Logical types take Avro's JSON (a
//     decimal's bytes, epoch numbers) and, where the underlying type leaves no doubt, a
//     decimal as a JSON number kept exactly (never rounded to the scale), RFC 3339
//     timestamps, "YYYY-MM-DD" dates, "HH:MM:SS[.fff]" times, and uuid strings checked
//     (avrological.go); goavro is given the underlying types. Bytes and fixed are strings
//     of code points 0-255 however the JSON writes them (goavro alone misreads a character
//     beyond ASCII written as itself).
//   - Protobuf: the .proto text is compiled with github.com/bufbuild/protocompile (Google's
//     well-known imports available); the data is the message's canonical JSON mapping,
//     read by protojson into a dynamicpb message and marshalled deterministically. The
//     message is Ref.Message, fully qualified with or without the package; empty, the
//     file's first message. protojson reads numbers as written: an integer beyond its
//     field's range, a fraction for an integer field, or a double beyond float64 is refused
//     (an integral 1e3 or 1.0 is an integer, as the JSON mapping says).
//   - JSON Schema: github.com/santhosh-tekuri/jsonschema/v6 (draft 7 unless the schema says
//     "$schema"), which validates numbers as written (json.Number, exact); the payload is the
//     data compacted, its numbers byte for byte.
//
// Decode is the inverse, for tests and tools: the schema id and the value as JSON.
//
// # Schema references
//
// A schema may reference schemas of other subjects (Confluent's "references": name,
// subject, version), which may reference others in turn (refs.go). Each is fetched with
// GET /subjects/{subject}/versions/{version} and handed to the format's library with the
// schema: Protobuf imports by the reference's name (the import path), read by protocompile's
// resolver from the referenced texts (Google's well-known files are built in, whether or not
// a reference names them); Avro named types by their full name, inlined where the schema
// first uses them since goavro compiles one schema text (avrorefs.go); JSON Schema
// documents as resources of the compiler under the reference's name, resolved against the
// schema's location and the "$id"s the documents declare (relative and absolute $refs both
// work; nothing else is loaded, from files or the network). The walk is bounded: 16 references deep, 256
// referenced schemas in all; a cycle is refused naming the chain of references. A
// reference the registry does not have is ErrUnknownSchema naming it (name, subject,
// version, and the chain to it); one it cannot answer is ErrUnavailable.
//
// # Caching
//
// A schema is fetched and compiled once, by id, and kept for the life of the Encoder: ids are
// immutable. So is a referenced subject's numbered version, fetched once for all the schemas
// that reference it. A subject's numbered version maps to its id for good too; a subject's latest
// version is remembered for Config.CacheTTL (30 s by default), then asked again. Concurrent
// callers needing the same schema share one request (singleflight), so a new schema costs at
// most one registry round trip; after that, Encode makes none. Failures are never cached.
// The Encoder is safe for concurrent use.
//
// # Failure handling
//
// Every error matches one sentinel of errors.go with errors.Is:
//
//   - ErrUnknownSchema: the id, subject, version or Protobuf message does not exist (a 404
//     or 422 from the registry), or the Ref names nothing. The caller's mistake: 400.
//   - ErrWrongFormat: the schema is of another type than the format asked for: 400.
//   - ErrMismatch, as a *MismatchError: the data does not fit the schema. Path names the
//     value inside the data (`customer.id`, `items[1].price`) as precisely as the library
//     tells: JSON Schema gives the instance location, protojson the position (read back to a
//     path with a JSON tokenizer), goavro the record fields and array items of its binary
//     encoder (tried on the data when Avro's JSON decoding fails, for the array positions that
//     decoder does not give). 400.
//   - ErrUnsupportedSchema: a schema text the format's library does not compile (with its
//     references), or references nested too deep, too many, in a cycle, or of another
//     format: 400.
//   - ErrUnavailable: the registry did not answer usably: connection refused, timeout
//     (Config.Timeout, 5 s by default, per request), a 5xx, credentials refused (401/403),
//     an answer that is not the registry's JSON, or the caller's context ending while it
//     waited. 503; nothing is cached, so the next call asks again.
//
// # Registry for the tests
//
// The tests run against the registry at SCHEMA_REGISTRY_URL when it is set (CI=true and
// unset or unreachable: they fail), and always against franz-go's in-process fake of the
// Confluent API (pkg/sr/srfake), which checks the encodings, the paths and the caching without
// a server but is not a registry. scripts/services.sh starts Apicurio Registry (its packaged
// app from Maven Central, Confluent's API at /apis/ccompat/v7) and prints its URL, and the
// suite reads the coordinator's records back with Confluent's Python client
// (test/records_readback_test.go), so the wire format is checked by a decoder we did not write.
package registry
