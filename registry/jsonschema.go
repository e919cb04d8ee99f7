package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// jsonSchema validates with github.com/santhosh-tekuri/jsonschema/v6. A schema without
// "$schema" is read as draft 7, the registry's default for JSON Schema. The payload is the
// data compacted: JSON Schema values travel as JSON.
type jsonSchema struct {
	sch *jsonschema.Schema
}

// jsonSchemaURL is where the schema is, for its relative "$ref"s: a hierarchical URL, so
// that "address.json" resolves beside it, and one nothing is loaded from.
const jsonSchemaURL = "https://schema-registry.invalid/schemas/schema.json"

var englishPrinter = message.NewPrinter(language.English)

// compileJSONSchema compiles text with the documents it references: each under its
// reference's name, as a "$ref" says it: resolved against the schema's own location and
// against the "$id"s the documents declare, so that absolute and relative names both
// work. Nothing else is loaded: a "$ref" to a document that is neither a reference nor in
// the schema is refused (no file or network is read).
func compileJSONSchema(text string, deps []dep) (*jsonSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(noLoader{})
	if err := c.AddResource(jsonSchemaURL, doc); err != nil {
		return nil, err
	}
	// The bases a reference's name resolves against: the schema's location, and the "$id"
	// of the schema and of each referenced document (a "$ref" in a document resolves against
	// its "$id").
	bases := []*url.URL{mustURL(jsonSchemaURL)}
	bases = appendID(bases, doc)
	for _, d := range deps {
		rdoc, err := jsonschema.UnmarshalJSON(strings.NewReader(d.schema.Schema))
		if err != nil {
			return nil, fmt.Errorf("reference %s: %w", d, err)
		}
		bases = appendID(bases, rdoc)
	}
	added := map[string]bool{jsonSchemaURL: true}
	for _, d := range deps {
		ref, err := url.Parse(d.name)
		if err != nil {
			return nil, fmt.Errorf("reference %s: its name is not a URL: %w", d, err)
		}
		for _, base := range bases {
			at := base.ResolveReference(ref)
			at.Fragment = ""
			if added[at.String()] {
				continue
			}
			added[at.String()] = true
			rdoc, _ := jsonschema.UnmarshalJSON(strings.NewReader(d.schema.Schema)) // read above
			if err := c.AddResource(at.String(), rdoc); err != nil {
				return nil, fmt.Errorf("reference %s: %w", d, err)
			}
		}
	}
	sch, err := c.Compile(jsonSchemaURL)
	if err != nil {
		return nil, err
	}
	return &jsonSchema{sch: sch}, nil
}

// appendID appends the absolute "$id" (draft 4: "id") of a document, if it has one.
func appendID(bases []*url.URL, doc any) []*url.URL {
	m, ok := doc.(map[string]any)
	if !ok {
		return bases
	}
	for _, k := range []string{"$id", "id"} {
		if id, ok := m[k].(string); ok {
			if u, err := url.Parse(id); err == nil && u.IsAbs() {
				return append(bases, u)
			}
			return bases
		}
	}
	return bases
}

// noLoader loads nothing: a schema's "$ref"s are to itself or to its references.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s is neither in the schema nor one of its references", u)
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func (j *jsonSchema) encode(data []byte) ([]byte, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, &MismatchError{Reason: "not one JSON value: " + err.Error()}
	}
	if err := j.sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, &MismatchError{Reason: err.Error()}
		}
		leaf := firstLeaf(ve)
		return nil, &MismatchError{
			Path:   instancePath(v, leaf.InstanceLocation),
			Reason: leaf.ErrorKind.LocalizedString(englishPrinter),
		}
	}
	var b bytes.Buffer
	b.Grow(len(data))
	if err := json.Compact(&b, data); err != nil {
		return nil, &MismatchError{Reason: err.Error()}
	}
	return b.Bytes(), nil
}

func (j *jsonSchema) decode(payload []byte) ([]byte, error) {
	if !json.Valid(payload) {
		return nil, fmt.Errorf("%w: JSON Schema payload is not JSON", ErrMismatch)
	}
	return payload, nil
}

// firstLeaf follows the first cause down to an error that has none: the most precise
// account of the first thing wrong.
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// instancePath formats a JSON Pointer's tokens into v, telling array positions from member
// names by the value met at each step.
func instancePath(v any, steps []string) string {
	isIndex := make([]bool, len(steps))
	cur := v
	for i, s := range steps {
		switch c := cur.(type) {
		case []any:
			isIndex[i] = true
			var n int
			if _, err := fmt.Sscanf(s, "%d", &n); err == nil && n >= 0 && n < len(c) {
				cur = c[n]
			} else {
				cur = nil
			}
		case map[string]any:
			cur = c[s]
		default:
			cur = nil
		}
	}
	return formatPath(steps, func(i int) bool { return isIndex[i] })
}
