package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoSchema is a .proto file compiled with github.com/bufbuild/protocompile (Google's
// well-known imports available); values are read with protojson into dynamicpb messages.
type protoSchema struct {
	file linker.File
}

// protoFileName is the schema's own file: a name no reference is likely to take (a
// reference's name is its import path).
const protoFileName = "kpgtx-registry/schema.proto"

// compileProto compiles text with the files it imports: each reference's text under its
// name (the import path), and Google's well-known files, built in.
func compileProto(text string, deps []dep) (*protoSchema, error) {
	files := map[string]string{protoFileName: text}
	for _, d := range deps {
		if prev, ok := files[d.name]; ok && prev != d.schema.Schema {
			return nil, fmt.Errorf("two references import %q with different texts (one of them %s)", d.name, d)
		}
		files[d.name] = d.schema.Schema
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(files),
		}),
	}
	compiled, err := c.Compile(context.Background(), protoFileName)
	if err != nil {
		return nil, err
	}
	return &protoSchema{file: compiled[0]}, nil
}

// message finds the message to encode (name: fully qualified, with or without the package;
// empty: the file's first message) and its Confluent message indexes: the position of each
// enclosing message, from the top level of the file down.
func (p *protoSchema) message(name string) (protoreflect.MessageDescriptor, []int, error) {
	var md protoreflect.MessageDescriptor
	if name == "" {
		if p.file.Messages().Len() == 0 {
			return nil, nil, errors.New("the schema has no message")
		}
		md = p.file.Messages().Get(0)
	} else {
		d := p.file.FindDescriptorByName(protoreflect.FullName(name))
		if d == nil && p.file.Package() != "" {
			d = p.file.FindDescriptorByName(p.file.Package() + "." + protoreflect.FullName(name))
		}
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			return nil, nil, fmt.Errorf("the schema has no message %q", name)
		}
		md = m
	}
	var index []int
	for d := protoreflect.Descriptor(md); ; d = d.Parent() {
		if _, ok := d.(protoreflect.MessageDescriptor); !ok {
			break
		}
		index = append(index, d.Index())
	}
	for i, j := 0, len(index)-1; i < j; i, j = i+1, j-1 {
		index[i], index[j] = index[j], index[i]
	}
	return md, index, nil
}

// byIndex is message's inverse, for Decode.
func (p *protoSchema) byIndex(index []int) (protoreflect.MessageDescriptor, error) {
	if len(index) == 0 {
		return nil, errors.New("no message index")
	}
	msgs := p.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range index {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v is not in the schema", index)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md, nil
}

func encodeProto(md protoreflect.MessageDescriptor, data []byte) ([]byte, error) {
	msg := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal(data, msg); err != nil {
		return nil, protoMismatch(data, err)
	}
	// protojson has checked proto2's required fields already: AllowPartial skips a second
	// walk of the message.
	payload, err := proto.MarshalOptions{Deterministic: true, AllowPartial: true}.Marshal(msg)
	if err != nil {
		return nil, &MismatchError{Reason: protoReason(err.Error())}
	}
	return payload, nil
}

func (p *protoSchema) decode(index []int, payload []byte) ([]byte, error) {
	md, err := p.byIndex(index)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	msg := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(payload, msg); err != nil {
		return nil, fmt.Errorf("%w: protobuf payload: %w", ErrMismatch, err)
	}
	out, err := protojson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	// protojson varies its whitespace on purpose; give callers one stable form.
	var b bytes.Buffer
	if err := json.Compact(&b, out); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// protojson says where it stopped as "(line L:C)", C counted in runes from 1.
var protoPos = regexp.MustCompile(`\(line (\d+):(\d+)\): `)

// protoMismatch names the field protojson refused: the JSON path at the position its error
// gives. Its messages start with "proto:" and a space or a no-break space, on purpose.
func protoMismatch(data []byte, err error) error {
	msg := err.Error()
	m := protoPos.FindStringSubmatchIndex(msg)
	if m == nil {
		return &MismatchError{Reason: protoReason(msg)}
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	return &MismatchError{Path: pathAt(data, offsetOf(data, line, col)), Reason: msg[m[1]:]}
}

func protoReason(msg string) string {
	msg = strings.TrimPrefix(msg, "proto:")
	return strings.TrimLeft(msg, " \u00a0")
}

// offsetOf turns a 1-based line and rune column into a byte offset of data.
func offsetOf(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(data); c++ {
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	return off
}
