package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/kpgtx/coordinator/txntype"
)

// encodeRecords encodes the schema-typed payloads that name no statement's result, and checks
// every resolved record's size, before anything runs (P1): a mismatch is a 400 naming the
// field, a registry that cannot be asked a 503.
func (c *Coordinator) encodeRecords(ctx context.Context, req *txntype.Request) error {
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
					return txntype.Invalid(field+"."+part.Name+".type", fmt.Sprintf("type %s needs a Schema Registry, and none is configured (COORDINATOR_SCHEMA_REGISTRY_URL)", p.Type))
				}
				continue // encoded once its statement ran (P2)
			}
			b, err := c.encodeSchema(ctx, field+"."+part.Name, p, p.Data)
			var se *txntype.SchemaError
			switch {
			case errors.As(err, &se) && se.Schema:
				return txntype.Invalid(field+"."+part.Name+"."+p.SchemaField(), se.Reason)
			case errors.As(err, &se):
				return txntype.Invalid(field+"."+part.Name+dataPath(se.Path), se.Reason)
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
		return txntype.Invalid("kafka", fmt.Sprintf("the records come to %d bytes once decoded, at most %d allowed (COORDINATOR_MAX_BODY_BYTES)", total, max))
	}
	return nil
}

// encodeSchema asks the registry to encode data; an error that is not a *SchemaError is the
// registry's unavailability (503, nothing run).
func (c *Coordinator) encodeSchema(ctx context.Context, field string, p *txntype.Payload, data []byte) ([]byte, error) {
	if c.cfg.Schemas == nil {
		return nil, &txntype.SchemaError{Reason: fmt.Sprintf("type %s needs a Schema Registry, and none is configured (COORDINATOR_SCHEMA_REGISTRY_URL)", p.Type)}
	}
	b, err := c.cfg.Schemas.Encode(ctx, p.Type, p.SchemaRef(), data)
	var se *txntype.SchemaError
	if err != nil && !errors.As(err, &se) {
		return nil, &txntype.OutcomeError{Sentinel: txntype.ErrUnavailable, Cause: &txntype.Failure{Participant: txntype.ParticipantSchemaRegistry,
			Class: txntype.ClassRetriable, Unavailable: true, Err: fmt.Errorf("%s: schema registry: %w", field, err)}}
	}
	return b, err
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
			v, err := txntype.Lookup(results, p.From, len(w.req.SQL))
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
			v, err := txntype.Lookup(results, h.From, len(w.req.SQL))
			if err != nil {
				return referenceFailure(name, h.From, err)
			}
			b, err := txntype.ResultText(v)
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
		return &txntype.Failure{Participant: txntype.ParticipantKafka, Class: txntype.ClassAbortable, Err: errors.New(err.Error())}
	}
	return nil
}

func referenceFailure(field, from string, err error) error {
	return &txntype.Failure{Participant: txntype.ParticipantKafka, Class: txntype.ClassAbortable,
		Err: fmt.Errorf("%s.from %q: %w: %v", field, from, errReference, err)}
}

// payloadFrom is the payload of p's type built from a statement's result v.
func (c *Coordinator) payloadFrom(ctx context.Context, field string, p *txntype.Payload, v any) ([]byte, error) {
	switch p.Type {
	case txntype.TypeJSON:
		return json.Marshal(v)
	case txntype.TypeString, txntype.TypeBinary:
		if u, ok := v.([16]byte); ok && p.Type == txntype.TypeString {
			v = txntype.UUIDText(u)
		}
		b, err := txntype.ResultText(v)
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
	var se *txntype.SchemaError
	if errors.As(err, &se) {
		return nil, &txntype.Failure{Participant: txntype.ParticipantKafka, Class: txntype.ClassAbortable,
			Err: fmt.Errorf("%s.from %q: the result does not fit the schema: %s", field, p.From, se.Error())}
	}
	return b, err
}
