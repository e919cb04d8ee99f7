package registry

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"
)

// schema is a registry schema compiled for its format: exactly one of avro, proto, json is
// set. It is immutable once built, so shared by every goroutine.
type schema struct {
	id    int
	typ   sr.SchemaType
	avro  *avroSchema
	proto *protoSchema
	json  *jsonSchema
}

// compile parses the text the registry returned with the format's library, with the
// schemas it references (refs.go: deps, in dependency order).
func compile(id int, sc sr.Schema, deps []dep) (*schema, error) {
	s := &schema{id: id, typ: sc.Type}
	var err error
	switch sc.Type {
	case sr.TypeAvro:
		s.avro, err = compileAvro(sc.Schema, deps)
	case sr.TypeProtobuf:
		s.proto, err = compileProto(sc.Schema, deps)
	case sr.TypeJSON:
		s.json, err = compileJSONSchema(sc.Schema, deps)
	default:
		err = fmt.Errorf("unknown schema type %v", sc.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: schema id %d (%s): %w", ErrUnsupportedSchema, id, sc.Type, err)
	}
	return s, nil
}
