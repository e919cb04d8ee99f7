package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

const jsonSchemaURL = "urn:kpgtx:registry:schema.json"

var englishPrinter = message.NewPrinter(language.English)

func compileJSONSchema(text string) (*jsonSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(jsonSchemaURL, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(jsonSchemaURL)
	if err != nil {
		return nil, err
	}
	return &jsonSchema{sch: sch}, nil
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
