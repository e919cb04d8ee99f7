package txntype

import "context"

// SchemaRef names a Schema Registry schema: by ID, or by Subject and Version (0: the latest).
// Message names a Protobuf message (empty: the schema's first).
type SchemaRef struct {
	ID      int
	Subject string
	Version int
	Message string
}

// Schemas encodes schema-typed payloads in the Confluent wire format (the registry package,
// wired by service).
type Schemas interface {
	// Encode returns the framed bytes of data (one JSON value). A *SchemaError says the schema
	// is not there or data does not fit it; any other error: the registry could not be asked.
	Encode(ctx context.Context, t PayloadType, ref SchemaRef, data []byte) ([]byte, error)
}

// SchemaError is data that does not fit its schema, or a schema that is not in the registry.
// Path names the field inside the data ("" for the schema itself).
type SchemaError struct {
	Path   string
	Reason string
	// Schema: the schema named is the problem (not in the registry, of another type, or one
	// that cannot be encoded against), not the data.
	Schema bool
}

func (e *SchemaError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// SchemaField names the field that named the schema.
func (p *Payload) SchemaField() string {
	if p.SchemaID != nil {
		return "schema_id"
	}
	return "subject"
}
