package registry

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/twmb/franz-go/pkg/sr"
)

var (
	// ErrUnknownSchema: the schema id, the subject or the subject's version is not in the
	// registry, nor a schema it references (or, for Protobuf, the schema has no message of
	// the requested name). The
	// request named something that does not exist: a client error (400).
	ErrUnknownSchema = errors.New("registry: unknown schema")

	// ErrWrongFormat: the schema is of another type than the one asked for, for example an
	// AVRO schema used for a "protobuf" value (400).
	ErrWrongFormat = errors.New("registry: schema is of another format")

	// ErrMismatch: the data does not match the schema. Errors of this kind are a
	// *MismatchError, which names the field (400).
	ErrMismatch = errors.New("registry: data does not match the schema")

	// ErrUnsupportedSchema: the schema is one this package cannot encode against: its text
	// does not compile with the format's library (with the schemas it references), or its
	// references are nested too deep, too many, form a cycle, or are of another format (400).
	ErrUnsupportedSchema = errors.New("registry: schema not supported")

	// ErrUnavailable: the registry could not be asked: unreachable, a timeout, a 5xx answer,
	// an answer that is not the registry's API, or credentials it refused. Nothing about the
	// failure is cached: the next call asks again (503).
	ErrUnavailable = errors.New("registry: schema registry unavailable")
)

// MismatchError says where data does not match its schema. It matches ErrMismatch with
// errors.Is.
type MismatchError struct {
	// Path names the value inside the data, as `customer.id` or `items[1].price`; empty for
	// the top-level value (or when the library does not say where).
	Path string
	// Reason is the library's account of what is wrong there.
	Reason string
}

func (e *MismatchError) Error() string {
	if e.Path == "" {
		return "data does not match the schema: " + e.Reason
	}
	return fmt.Sprintf("data does not match the schema at %s: %s", e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// classify turns an error of the registry client (transport, HTTP status, context) into one
// of this package's sentinels, wrapping both. what names the schema asked for.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusNotFound:
			// 40401 subject, 40402 version, 40403 schema not found.
			return fmt.Errorf("%w: %s: %w", ErrUnknownSchema, what, err)
		case re.StatusCode == http.StatusUnprocessableEntity:
			// 42202 invalid version, 42208 invalid subject: nothing by that name can exist.
			return fmt.Errorf("%w: %s: %w", ErrUnknownSchema, what, err)
		default:
			// 5xx, and 401/403 (our credentials): the registry is not usable as configured.
			return fmt.Errorf("%w: %s: HTTP %d: %w", ErrUnavailable, what, re.StatusCode, err)
		}
	}
	// Anything else is a transport failure (refused, reset, DNS, TLS), a timeout or a
	// cancelled context, or an answer that does not decode.
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}
