package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// Numbers in Avro data are checked against their schema type before goavro reads them, with
// the numbers as written (read with a JSON tokenizer, the way json.Decoder.UseNumber keeps
// them), never through a float64:
//
//   - an int or a long is an integer written without fraction or exponent (1.0 and 1e3 are
//     not: Avro's JSON decoder takes integer tokens only), within the type's range
//     (12345678901234567890 is not a long);
//   - a float or a double is a number within the type's range (1e400 and 1e999 are not:
//     goavro would read 1e999 as +Inf), and not null (goavro would read it as NaN; in Avro's
//     JSON encoding null is the value of type null, or of a union's null branch, only).
//
// goavro refuses most of these too, but without naming the field (1e3 for a long), with the
// number rounded through a float64 in its message (12345678901234567890 as
// 12345678901234567168), or not at all (1e999, null for a double). The check follows the
// schema's records, arrays, maps and unions ({"type": value}), resolving named types by the
// specification's namespace rules; whatever it does not recognize it skips, for goavro.

// avroNumbers is a schema compiled for the check.
type avroNumbers struct {
	root *avroNode
	// floats: the schema has a float or a double, whose wrong values goavro accepts: the
	// check runs before every encoding. Without, it runs only once goavro refused the data,
	// to name the field.
	floats bool
	// logical: the schema has a logical type, or bytes, whose data is read here
	// (avrological.go): the data is prepared before every encoding, its convenient forms
	// turned into Avro's.
	logical bool
	// strip: the schema has logical types goavro is given as their underlying types
	// (stripLogical).
	strip bool
}

type avroKind uint8

const (
	avroOther  avroKind = iota // nothing to check inside: skipped
	avroNumber                 // int, long, float or double
	avroRecord
	avroArray
	avroMap
	avroUnion
	avroLogical // a logical type: avrological.go
)

type avroNode struct {
	kind     avroKind
	typ      string               // avroNumber: int, long, float or double
	fields   map[string]avroNamed // avroRecord: by field name
	items    *avroNode            // avroArray's items, avroMap's values
	branches map[string]avroNamed // avroUnion: by the name Avro's JSON encoding gives a branch

	// avroLogical: the logical type, its underlying type (typ), and a decimal's precision,
	// scale and, on a fixed, size.
	logical                string
	precision, scale, size int
}

// avroNamed is a record's field or a union's branch: its name (for the path) and its type.
type avroNamed struct {
	name string
	node *avroNode
}

var avroOtherNode = &avroNode{}

// newAvroNumbers compiles text, which goavro compiled already; nil when it does not read.
func newAvroNumbers(text string) *avroNumbers {
	var s any
	if json.Unmarshal([]byte(text), &s) != nil {
		return nil
	}
	a := &avroNumbers{}
	b := avroBuilder{a: a, named: map[string]*avroNode{}}
	a.root = b.node(s, "")
	return a
}

type avroBuilder struct {
	a     *avroNumbers
	named map[string]*avroNode // by full name, in the order of definition
}

// fullName is name's full name in namespace ns (a name with a dot is one already).
func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

// namedFull is the full name of a named type's definition d in namespace ns, and the namespace
// its inner types are in.
func namedFull(d map[string]any, ns string) (full, inner string) {
	name, _ := d["name"].(string)
	if n, ok := d["namespace"].(string); ok && !strings.Contains(name, ".") {
		ns = n
	}
	full = fullName(name, ns)
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		return full, full[:i]
	}
	return full, ""
}

// node compiles schema s, in namespace ns.
func (b *avroBuilder) node(s any, ns string) *avroNode {
	switch s := s.(type) {
	case string:
		switch s {
		case "int", "long", "float", "double":
			if s == "float" || s == "double" {
				b.a.floats = true
			}
			return &avroNode{kind: avroNumber, typ: s}
		case "null", "boolean", "string":
			return avroOtherNode
		case "bytes":
			return b.logicalNode(map[string]any{}, s)
		}
		if n, ok := b.named[fullName(s, ns)]; ok {
			return n
		}
		if n, ok := b.named[s]; ok {
			return n
		}
		return avroOtherNode
	case []any:
		n := &avroNode{kind: avroUnion, branches: map[string]avroNamed{}}
		for _, br := range s {
			name := branchName(br, ns)
			n.branches[name] = avroNamed{name, b.node(br, ns)}
		}
		return n
	case map[string]any:
		t, ok := s["type"].(string)
		if !ok {
			return b.node(s["type"], ns)
		}
		switch t {
		case "record", "error":
			full, inner := namedFull(s, ns)
			n := &avroNode{kind: avroRecord, fields: map[string]avroNamed{}}
			b.named[full] = n // before its fields: a record may contain itself
			fields, _ := s["fields"].([]any)
			for _, f := range fields {
				if f, ok := f.(map[string]any); ok {
					name, _ := f["name"].(string)
					n.fields[name] = avroNamed{name, b.node(f["type"], inner)}
				}
			}
			return n
		case "enum", "fixed":
			full, _ := namedFull(s, ns)
			n := avroOtherNode
			if l := b.logicalNode(s, t); l != nil {
				n = l
			}
			b.named[full] = n
			return n
		case "array":
			return &avroNode{kind: avroArray, items: b.node(s["items"], ns)}
		case "map":
			return &avroNode{kind: avroMap, items: b.node(s["values"], ns)}
		}
		if l := b.logicalNode(s, t); l != nil {
			return l
		}
		return b.node(t, ns) // a primitive with attributes, or a named type
	}
	return avroOtherNode
}

// branchName is the name a union's value gives branch s in Avro's JSON encoding: a primitive's
// or a named type's full name, "array" or "map".
func branchName(s any, ns string) string {
	switch s := s.(type) {
	case string:
		switch s {
		case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
			return s
		}
		return fullName(s, ns)
	case map[string]any:
		t, _ := s["type"].(string)
		switch t {
		case "record", "error", "enum", "fixed":
			full, _ := namedFull(s, ns)
			return full
		}
		return t
	}
	return ""
}

// avroReader is a pooled tokenizer over one value's data.
type avroReader struct {
	r   bytes.Reader
	dec jsontext.Decoder
}

var avroReaders = sync.Pool{New: func() any { return new(avroReader) }}

// check reads data and checks its numbers against the schema: a *MismatchError naming the
// first wrong one, or nil (also when data is not JSON, or not of the schema's shape: goavro
// says where).
func (a *avroNumbers) check(data []byte) error {
	rd := avroReaders.Get().(*avroReader)
	defer func() {
		rd.r.Reset(nil) // keep no data alive in the pool
		avroReaders.Put(rd)
	}()
	rd.r.Reset(data)
	rd.dec.Reset(&rd.r)
	var p avroPath
	var me *MismatchError
	if err := walkAvro(a.root, &rd.dec, &p, 0); err != nil && asMismatch(err, &me) {
		return me
	}
	return nil
}

// prepare checks data as check does and returns it with the logical types' convenient
// forms replaced by Avro's JSON (avrological.go): data itself when there is none. Data
// that is not JSON, or not of the schema's shape, is returned as it is, for goavro to say
// what is wrong.
func (a *avroNumbers) prepare(data []byte) ([]byte, error) {
	rd := avroReaders.Get().(*avroReader)
	defer func() {
		rd.r.Reset(nil)
		avroReaders.Put(rd)
	}()
	rd.r.Reset(data)
	rd.dec.Reset(&rd.r)
	var p avroPath
	if err := walkAvro(a.root, &rd.dec, &p, 0); err != nil {
		var me *MismatchError
		if asMismatch(err, &me) {
			return nil, me
		}
		return data, nil
	}
	if len(p.edits) == 0 {
		return data, nil
	}
	out := make([]byte, 0, len(data)+16*len(p.edits))
	at := int64(0)
	for _, e := range p.edits {
		out = append(out, data[at:e.start]...)
		out = append(out, e.value...)
		at = e.end
	}
	return append(out, data[at:]...), nil
}

func asMismatch(err error, me **MismatchError) bool {
	m, ok := err.(*MismatchError)
	*me = m
	return ok
}

// avroPath is the path of the value being read, and the values the walk replaces.
type avroPath struct {
	steps []string
	index []bool
	edits []avroEdit // in the order of the data
}

// avroEdit replaces data[start:end] with value.
type avroEdit struct {
	start, end int64
	value      []byte
}

func (p *avroPath) push(step string, index bool) {
	p.steps, p.index = append(p.steps, step), append(p.index, index)
}

func (p *avroPath) pop() { p.steps, p.index = p.steps[:len(p.steps)-1], p.index[:len(p.index)-1] }

func (p *avroPath) mismatch(reason string) error {
	return &MismatchError{Path: formatPath(p.steps, func(i int) bool { return p.index[i] }), Reason: reason}
}

// maxAvroDepth bounds the walk (the API bounds the data's nesting well below it).
const maxAvroDepth = 1000

// walkAvro reads the next value of dec as schema node n: a *MismatchError for a wrong number,
// another error when the data is not JSON (goavro then says what is wrong).
func walkAvro(n *avroNode, dec *jsontext.Decoder, p *avroPath, depth int) error {
	if depth > maxAvroDepth {
		return dec.SkipValue()
	}
	switch n.kind {
	case avroNumber:
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		return checkAvroNumber(n.typ, v, p)
	case avroLogical:
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		repl, err := n.logicalValue(v, p)
		if err != nil || repl == nil {
			return err
		}
		end := dec.InputOffset()
		p.edits = append(p.edits, avroEdit{start: end - int64(len(v)), end: end, value: repl})
		return nil
	case avroRecord, avroMap:
		if dec.PeekKind() != '{' {
			return dec.SkipValue()
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			name, err := readName(dec)
			if err != nil {
				return err
			}
			inner := avroNamed{node: n.items}
			if n.kind == avroRecord {
				inner = n.fields[string(name)] // no copy of name: a map lookup
			}
			if inner.node == nil || inner.node == avroOtherNode {
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			if n.kind == avroMap {
				inner.name = string(name)
			}
			p.push(inner.name, false)
			if err := walkAvro(inner.node, dec, p, depth+1); err != nil {
				return err
			}
			p.pop()
		}
		_, err := dec.ReadToken()
		return err
	case avroArray:
		if dec.PeekKind() != '[' {
			return dec.SkipValue()
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for i := 0; dec.PeekKind() != ']'; i++ {
			p.push(strconv.Itoa(i), true)
			if err := walkAvro(n.items, dec, p, depth+1); err != nil {
				return err
			}
			p.pop()
		}
		_, err := dec.ReadToken()
		return err
	case avroUnion:
		if dec.PeekKind() != '{' {
			return dec.SkipValue() // null, or not a union's value: goavro says which
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for first := true; dec.PeekKind() != '}'; first = false {
			name, err := readName(dec)
			if err != nil {
				return err
			}
			b, ok := n.branches[string(name)]
			if !first || !ok {
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			p.push(b.name, false)
			if err := walkAvro(b.node, dec, p, depth+1); err != nil {
				return err
			}
			p.pop()
		}
		_, err := dec.ReadToken()
		return err
	}
	return dec.SkipValue()
}

// readName reads an object's member name, unquoted; valid until the next read.
func readName(dec *jsontext.Decoder) ([]byte, error) {
	v, err := dec.ReadValue()
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], nil
	}
	return jsontext.AppendUnquote(nil, v)
}

// avroRanges are the integer types' bounds, for the reasons.
var avroRanges = map[string]string{
	"int":  "-2147483648 to 2147483647",
	"long": "-9223372036854775808 to 9223372036854775807",
}

// checkAvroNumber checks v, a value of numeric type t.
func checkAvroNumber(t string, v jsontext.Value, p *avroPath) error {
	switch v.Kind() {
	case 'n':
		return p.mismatch(fmt.Sprintf("type %s does not take null (null is a value of type null, or of a union's null branch)", t))
	case '0':
	default:
		return nil // another type: goavro names it
	}
	fraction := bytes.ContainsAny(v, ".eE")
	digits := len(v)
	if v[0] == '-' {
		digits--
	}
	switch t {
	case "int", "long":
		if fraction {
			return p.mismatch(fmt.Sprintf("type %s takes an integer written without fraction or exponent, not %s", t, shown(v)))
		}
		bits, safe := 64, 18 // an integer of at most safe digits is within the type's range
		if t == "int" {
			bits, safe = 32, 9
		}
		if digits <= safe {
			return nil
		}
		if _, err := strconv.ParseInt(string(v), 10, bits); err != nil {
			return p.mismatch(fmt.Sprintf("%s is beyond the range of type %s (%s)", shown(v), t, avroRanges[t]))
		}
	default:
		bits, safe := 64, 300 // a number without exponent of at most safe characters is within range
		if t == "float" {
			bits, safe = 32, 30
		}
		if !bytes.ContainsAny(v, "eE") && len(v) <= safe {
			return nil
		}
		if _, err := strconv.ParseFloat(string(v), bits); err != nil {
			return p.mismatch(fmt.Sprintf("%s is beyond the range of type %s", shown(v), t))
		}
	}
	return nil
}

// shown is a number as written, cut short when long.
func shown(v []byte) string {
	if len(v) > 40 {
		return string(v[:40]) + "…"
	}
	return string(v)
}
