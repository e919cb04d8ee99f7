package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

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

// encodeRecords encodes the schema-typed payloads that name no statement's result, and checks
// every resolved record's size, before anything runs (P1): a mismatch is a 400 naming the
// field, a registry that cannot be asked a 503.
func (c *Coordinator) encodeRecords(ctx context.Context, req *Request) error {
	total := 0
	for i := range req.Kafka {
		r := &req.Kafka[i]
		field := "kafka[" + strconv.Itoa(i) + "]"
		for _, part := range r.Parts() {
			p := part.Payload
			if _, done := p.Resolved(); done || !p.Type.Schema() {
				continue
			}
			if p.From != "" {
				if c.cfg.Schemas == nil { // knowable now: refused before anything runs (P1)
					return invalid(field+"."+part.Name+".type", fmt.Sprintf("type %s needs a Schema Registry, and none is configured (COORDINATOR_SCHEMA_REGISTRY_URL)", p.Type))
				}
				continue // encoded once its statement ran (P2)
			}
			b, err := c.encodeSchema(ctx, field+"."+part.Name, p, p.Data)
			var se *SchemaError
			switch {
			case errors.As(err, &se) && se.Schema:
				return invalid(field+"."+part.Name+"."+p.SchemaField(), se.Reason)
			case errors.As(err, &se):
				return invalid(field+"."+part.Name+dataPath(se.Path), se.Reason)
			case err != nil:
				return err
			}
			p.Resolve(b)
		}
		if n, ok := r.WireSize(); ok {
			total += n
		}
	}
	if err := c.limitRecordBytes(total); err != nil {
		return err
	}
	if c.kafka != nil {
		return c.kafka.CheckSizes(ctx, req.Kafka)
	}
	return nil
}

// limitRecordBytes applies the request's cap to its records' decoded bytes.
func (c *Coordinator) limitRecordBytes(total int) error {
	if max := c.cfg.Limits.MaxRecordBytes; max > 0 && int64(total) > max {
		return invalid("kafka", fmt.Sprintf("the records come to %d bytes once decoded, at most %d allowed (COORDINATOR_MAX_BODY_BYTES)", total, max))
	}
	return nil
}

// encodeSchema asks the registry to encode data; an error that is not a *SchemaError is the
// registry's unavailability (503, nothing run).
func (c *Coordinator) encodeSchema(ctx context.Context, field string, p *Payload, data []byte) ([]byte, error) {
	if c.cfg.Schemas == nil {
		return nil, &SchemaError{Reason: fmt.Sprintf("type %s needs a Schema Registry, and none is configured (COORDINATOR_SCHEMA_REGISTRY_URL)", p.Type)}
	}
	b, err := c.cfg.Schemas.Encode(ctx, p.Type, p.SchemaRef(), data)
	var se *SchemaError
	if err != nil && !errors.As(err, &se) {
		return nil, &OutcomeError{Sentinel: ErrUnavailable, Cause: &Failure{Participant: ParticipantSchemaRegistry,
			Class: ClassRetriable, Unavailable: true, Err: fmt.Errorf("%s: schema registry: %w", field, err)}}
	}
	return b, err
}

// SchemaField names the field that named the schema.
func (p *Payload) SchemaField() string {
	if p.SchemaID != nil {
		return "schema_id"
	}
	return "subject"
}

// dataPath is the field of a value inside a payload's data; the data itself when p is empty
// (data that is wrong as a whole, null for a record among them).
func dataPath(p string) string {
	if p == "" {
		return ".data"
	}
	if p[0] == '[' {
		return ".data" + p
	}
	return ".data." + p
}

// errReference: a record names a statement's result that is not there (P2); the request aborts.
var errReference = errors.New("the record names a statement result that is not there")

// materialize resolves the parts of w's records that name its statements' results (P2), once
// its statements ran, and checks the records' sizes. Its error aborts the request (409; 503 when
// the registry could not be asked).
func (c *Coordinator) materialize(ctx context.Context, w *work) error {
	if !w.req.Derived() {
		return nil
	}
	results := w.t.SQL
	total := 0
	for i := range w.req.Kafka {
		r := &w.req.Kafka[i]
		field := "kafka[" + strconv.Itoa(i) + "]"
		for _, part := range r.Parts() {
			p := part.Payload
			if p.From == "" {
				continue // a part resolved from a result is resolved again on a rerun
			}
			name := field + "." + part.Name
			v, err := Lookup(results, p.From, len(w.req.SQL))
			if err != nil {
				return referenceFailure(name, p.From, err)
			}
			b, err := c.payloadFrom(ctx, name, p, v)
			if err != nil {
				return err
			}
			p.Resolve(b)
		}
		for j := range r.Headers {
			h := &r.Headers[j]
			if !h.FromResult() {
				continue
			}
			name := field + ".headers[" + strconv.Itoa(j) + "]"
			v, err := Lookup(results, h.From, len(w.req.SQL))
			if err != nil {
				return referenceFailure(name, h.From, err)
			}
			b, err := ResultText(v)
			if err != nil {
				return referenceFailure(name, h.From, err)
			}
			h.Resolve(b)
		}
		n, _ := r.WireSize()
		total += n
	}
	err := c.limitRecordBytes(total)
	if err == nil {
		err = c.kafka.CheckSizes(ctx, w.req.Kafka)
	}
	if err != nil {
		// The statements ran: an abort (409), not a malformed request (the chain would say 400).
		return &Failure{Participant: ParticipantKafka, Class: ClassAbortable, Err: errors.New(err.Error())}
	}
	return nil
}

func referenceFailure(field, from string, err error) error {
	return &Failure{Participant: ParticipantKafka, Class: ClassAbortable,
		Err: fmt.Errorf("%s.from %q: %w: %v", field, from, errReference, err)}
}

// payloadFrom is the payload of p's type built from a statement's result v.
func (c *Coordinator) payloadFrom(ctx context.Context, field string, p *Payload, v any) ([]byte, error) {
	switch p.Type {
	case TypeJSON:
		return json.Marshal(v)
	case TypeString, TypeBinary:
		if u, ok := v.([16]byte); ok && p.Type == TypeString {
			v = UUIDText(u)
		}
		b, err := ResultText(v)
		if err != nil {
			return nil, referenceFailure(field, p.From, err)
		}
		if v == nil {
			return nil, referenceFailure(field, p.From, errors.New("the column is NULL: leave the key or value out (null) instead"))
		}
		return b, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, referenceFailure(field, p.From, err)
	}
	b, err := c.encodeSchema(ctx, field, p, data)
	var se *SchemaError
	if errors.As(err, &se) {
		return nil, &Failure{Participant: ParticipantKafka, Class: ClassAbortable,
			Err: fmt.Errorf("%s.from %q: the result does not fit the schema: %s", field, p.From, se.Error())}
	}
	return b, err
}
