package service

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/kpgtx/coordinator/registry"
	"github.com/kpgtx/coordinator/txntype"
)

// schemas adapts the registry package to the coordinator's record encoding (txntype.Schemas):
// what the request got wrong becomes a *txntype.SchemaError (400, or 409 once statements ran);
// anything else is the registry's unavailability (503, nothing run).
type schemas struct{ enc *registry.Encoder }

// newSchemas connects nothing: a registry that is down at startup only fails the requests that
// need it.
func newSchemas(c SchemaRegistry) (txntype.Schemas, error) {
	if c.URL == "" {
		return nil, nil
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("COORDINATOR_SCHEMA_REGISTRY_URL=%q: an http or https URL", c.URL)
	}
	enc, err := registry.New(registry.Config{URL: c.URL, Username: c.User, Password: c.Password.Reveal(),
		Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("COORDINATOR_SCHEMA_REGISTRY_URL: %w", err)
	}
	return schemas{enc: enc}, nil
}

func (s schemas) Encode(ctx context.Context, t txntype.PayloadType, ref txntype.SchemaRef, data []byte) ([]byte, error) {
	b, err := s.enc.Encode(ctx, registry.Format(t), registry.Ref{ID: ref.ID, Subject: ref.Subject,
		Version: ref.Version, Message: ref.Message}, data)
	return b, schemaError(err)
}

// schemaError is the one place the registry's errors become the coordinator's.
func schemaError(err error) error {
	var me *registry.MismatchError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &me):
		return &txntype.SchemaError{Path: me.Path, Reason: me.Reason}
	case errors.Is(err, registry.ErrUnknownSchema), errors.Is(err, registry.ErrWrongFormat),
		errors.Is(err, registry.ErrUnsupportedSchema):
		return &txntype.SchemaError{Schema: true, Reason: err.Error()}
	}
	return err // registry.ErrUnavailable, or a cancelled request
}
