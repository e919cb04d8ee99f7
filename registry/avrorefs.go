package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Avro schema references: a schema uses a named type (record, enum, fixed) that another
// subject's schema defines, by its name; the reference's name is the type's full name.
// goavro compiles one schema text and offers no way to hand it named types defined
// elsewhere (its NewCodecFrom takes an unexported builder), so the schema is composed the
// way the specification reads a name: each named type the referenced schemas define is
// inlined, as its definition, where the schema first uses it, and used by name after that.
// An inlined definition carries its full name ("name": "com.acme.Address", no
// "namespace"), so that it means the same wherever it lands. This is a transform of the
// schemas' JSON trees (encoding/json, numbers kept as written), not a parser: goavro still
// reads the result, and says what is wrong with it.
//
// Where the specification and goavro part, goavro wins: a type in the null namespace
// cannot be inlined inside a namespace (goavro reads an empty "namespace" as the enclosing
// one).

// avroDef is a named type's definition in a referenced schema, with the namespace that
// encloses it there.
type avroDef struct {
	def map[string]any
	ns  string
	dep dep
}

// composeAvro is text with the named types it uses from deps inlined at their first use.
func composeAvro(text string, deps []dep) (string, error) {
	root, err := avroJSON(text)
	if err != nil {
		return "", err
	}
	c := avroComposer{index: map[string]avroDef{}, defined: map[string]bool{}}
	for _, d := range deps {
		tree, err := avroJSON(d.schema.Schema)
		if err != nil {
			return "", fmt.Errorf("reference %s: %w", d, err)
		}
		c.collect(tree, "", d)
	}
	out := c.walk(root, "", false)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return "", err
	}
	return b.String(), nil
}

// avroJSON reads a schema's JSON, its numbers (defaults) as written.
func avroJSON(text string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

type avroComposer struct {
	index   map[string]avroDef // the referenced schemas' named types, by full name
	defined map[string]bool    // the named types defined so far, in the order goavro reads
}

// collect indexes the named types schema s (in namespace ns) of dep d defines, the first
// definition of a name winning.
func (c *avroComposer) collect(s any, ns string, d dep) {
	switch s := s.(type) {
	case []any:
		for _, br := range s {
			c.collect(br, ns, d)
		}
	case map[string]any:
		t, ok := s["type"].(string)
		if !ok {
			c.collect(s["type"], ns, d)
			return
		}
		switch t {
		case "record", "error", "enum", "fixed":
			full, inner := namedFull(s, ns)
			if _, dup := c.index[full]; !dup {
				c.index[full] = avroDef{def: s, ns: ns, dep: d}
			}
			if fields, ok := s["fields"].([]any); ok {
				for _, f := range fields {
					if f, ok := f.(map[string]any); ok {
						c.collect(f["type"], inner, d)
					}
				}
			}
		case "array":
			c.collect(s["items"], ns, d)
		case "map":
			c.collect(s["values"], ns, d)
		}
	}
}

// walk is schema s, in namespace ns, with the referenced types it uses first inlined.
// moved: s is a referenced schema's definition placed in another: its named types get
// their full names.
func (c *avroComposer) walk(s any, ns string, moved bool) any {
	switch s := s.(type) {
	case string:
		switch s {
		case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
			return s
		}
		for _, full := range []string{fullName(s, ns), s} {
			if c.defined[full] {
				return full
			}
			if d, ok := c.index[full]; ok {
				return c.walk(d.def, d.ns, true)
			}
		}
		return s // goavro says it is unknown
	case []any:
		out := make([]any, len(s))
		for i, br := range s {
			out[i] = c.walk(br, ns, moved)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(s))
		for k, v := range s {
			out[k] = v
		}
		t, ok := s["type"].(string)
		if !ok {
			out["type"] = c.walk(s["type"], ns, moved)
			return out
		}
		switch t {
		case "record", "error", "enum", "fixed":
			full, inner := namedFull(s, ns)
			if c.defined[full] {
				return full // defined already, by an inlined reference: used by name
			}
			c.defined[full] = true
			if moved {
				out["name"] = full
				delete(out, "namespace")
			}
			if fields, ok := s["fields"].([]any); ok {
				nf := make([]any, len(fields))
				for i, f := range fields {
					fm, ok := f.(map[string]any)
					if !ok {
						nf[i] = f
						continue
					}
					g := make(map[string]any, len(fm))
					for k, v := range fm {
						g[k] = v
					}
					g["type"] = c.walk(fm["type"], inner, moved)
					nf[i] = g
				}
				out["fields"] = nf
			}
		case "array":
			out["items"] = c.walk(s["items"], ns, moved)
		case "map":
			out["values"] = c.walk(s["values"], ns, moved)
		default:
			out["type"] = c.walk(t, ns, moved) // a primitive with attributes, or a name
			if _, named := out["type"].(map[string]any); named {
				return out["type"]
			}
		}
		return out
	}
	return s
}
