package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/singleflight"
)

// Format is the encoding of a value: one of the Schema Registry's three schema types.
type Format string

const (
	Avro       Format = "avro"
	Protobuf   Format = "protobuf"
	JSONSchema Format = "jsonschema"
)

// schemaType is the registry's name of the format.
func (f Format) schemaType() (sr.SchemaType, error) {
	switch f {
	case Avro:
		return sr.TypeAvro, nil
	case Protobuf:
		return sr.TypeProtobuf, nil
	case JSONSchema:
		return sr.TypeJSON, nil
	}
	return 0, fmt.Errorf("%w: format %q is not one of avro, protobuf, jsonschema", ErrWrongFormat, string(f))
}

// Ref names a schema: by ID, or by Subject and Version (0 = the subject's latest version).
// Message is for Protobuf: the fully qualified name of the message to encode (empty: the
// schema's first message); the other formats ignore it.
type Ref struct {
	ID      int
	Subject string
	Version int
	Message string
}

func (r Ref) String() string {
	switch {
	case r.ID != 0:
		return "schema id " + strconv.Itoa(r.ID)
	case r.Version == 0:
		return fmt.Sprintf("subject %q (latest version)", r.Subject)
	default:
		return fmt.Sprintf("subject %q version %d", r.Subject, r.Version)
	}
}

// Config says where the registry is and how long to trust what it said.
type Config struct {
	// URL of the registry's Confluent-compatible API, e.g. http://host:8081 or, for
	// Apicurio Registry, http://host:8080/apis/ccompat/v7.
	URL string
	// Username and Password, when set, are sent as HTTP basic authentication.
	Username, Password string
	// Timeout bounds one request to the registry (default 5 s).
	Timeout time.Duration
	// CacheTTL is how long a subject's latest version is remembered (default 30 s; negative:
	// asked every time). Schemas by id, and a subject's numbered versions, never change and
	// are cached for the life of the Encoder.
	CacheTTL time.Duration
}

const (
	defaultTimeout  = 5 * time.Second
	defaultCacheTTL = 30 * time.Second
)

// Encoder encodes and decodes values in the Confluent wire format against schemas of one
// registry. It is safe for concurrent use.
type Encoder struct {
	cl      *sr.Client
	timeout time.Duration
	ttl     time.Duration

	mu       sync.RWMutex
	byID     map[int]*schema        // immutable: kept forever
	bySubver map[subver]subverEntry // subject/version -> id
	refTexts map[subver]sr.Schema   // referenced subjects' numbered versions, as fetched: immutable
	flights  singleflight.Group     // one registry round trip per key at a time
}

type subver struct {
	subject string
	version int
}

type subverEntry struct {
	id      int
	fetched time.Time
}

// New returns an Encoder for the registry at cfg.URL. It does not contact the registry:
// Ping does.
func New(cfg Config) (*Encoder, error) {
	if cfg.URL == "" {
		return nil, errors.New("registry: no URL")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = defaultCacheTTL
	}
	opts := []sr.ClientOpt{
		sr.URLs(cfg.URL),
		sr.HTTPClient(&http.Client{Timeout: cfg.Timeout}),
		sr.UserAgent("kpgtx-coordinator"),
	}
	if cfg.Username != "" || cfg.Password != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("registry: client for %q: %w", cfg.URL, err)
	}
	return &Encoder{
		cl:       cl,
		timeout:  cfg.Timeout,
		ttl:      cfg.CacheTTL,
		byID:     make(map[int]*schema),
		bySubver: make(map[subver]subverEntry),
		refTexts: make(map[subver]sr.Schema),
	}, nil
}

// Ping reads the registry's global compatibility setting (GET /config, small and served by
// every Confluent-compatible registry): ErrUnavailable when that fails.
func (e *Encoder) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	res := e.cl.Compatibility(ctx)
	if len(res) == 0 {
		return fmt.Errorf("%w: ping: no answer", ErrUnavailable)
	}
	if err := res[0].Err; err != nil {
		return fmt.Errorf("%w: ping: %w", ErrUnavailable, err)
	}
	return nil
}

// Encode checks data (one JSON value, as raw bytes) against the schema ref names and returns
// it in the Confluent wire format: magic byte 0x00, the schema id (4 bytes, big-endian), for
// Protobuf the message indexes, then the payload. Avro data is Avro's JSON encoding (unions
// as {"type": value}), as Confluent's REST Proxy takes it; Protobuf data is the message's
// canonical JSON mapping; JSON Schema data is any JSON value, sent compacted.
func (e *Encoder) Encode(ctx context.Context, f Format, ref Ref, data []byte) ([]byte, error) {
	want, err := f.schemaType()
	if err != nil {
		return nil, err
	}
	s, err := e.resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	if s.typ != want {
		return nil, fmt.Errorf("%w: %s is of type %s, not %s", ErrWrongFormat, ref, s.typ, want)
	}
	var h sr.ConfluentHeader
	switch want {
	case sr.TypeAvro:
		payload, err := s.avro.encode(data)
		if err != nil {
			return nil, err
		}
		out, _ := h.AppendEncode(make([]byte, 0, 5+len(payload)), s.id, nil)
		return append(out, payload...), nil
	case sr.TypeProtobuf:
		md, index, err := s.proto.message(ref.Message)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnknownSchema, ref, err)
		}
		payload, err := encodeProto(md, data)
		if err != nil {
			return nil, err
		}
		out, _ := h.AppendEncode(make([]byte, 0, 6+2*len(index)+len(payload)), s.id, index)
		return append(out, payload...), nil
	default:
		payload, err := s.json.encode(data)
		if err != nil {
			return nil, err
		}
		out, _ := h.AppendEncode(make([]byte, 0, 5+len(payload)), s.id, nil)
		return append(out, payload...), nil
	}
}

// Decode is Encode's inverse: it reads the schema id from b, fetches that schema (cached)
// and returns the id and the value as JSON (Avro: its JSON encoding; Protobuf: protojson,
// compacted; JSON Schema: the payload as it is).
func (e *Encoder) Decode(ctx context.Context, f Format, b []byte) (int, []byte, error) {
	want, err := f.schemaType()
	if err != nil {
		return 0, nil, err
	}
	var h sr.ConfluentHeader
	id, rest, err := h.DecodeID(b)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: not in the Confluent wire format: %w", ErrMismatch, err)
	}
	s, err := e.byIDCached(ctx, id)
	if err != nil {
		return id, nil, err
	}
	if s.typ != want {
		return id, nil, fmt.Errorf("%w: schema id %d is of type %s, not %s", ErrWrongFormat, id, s.typ, want)
	}
	var out []byte
	switch want {
	case sr.TypeAvro:
		out, err = s.avro.decode(rest)
	case sr.TypeProtobuf:
		var index []int
		index, rest, err = h.DecodeIndex(rest, 64)
		if err != nil {
			return id, nil, fmt.Errorf("%w: message indexes: %w", ErrMismatch, err)
		}
		out, err = s.proto.decode(index, rest)
	default:
		out, err = s.json.decode(rest)
	}
	return id, out, err
}

// resolve finds the schema ref names, from the cache or with one registry round trip.
func (e *Encoder) resolve(ctx context.Context, ref Ref) (*schema, error) {
	switch {
	case ref.ID != 0 && ref.Subject != "":
		return nil, fmt.Errorf("%w: a schema is named by id or by subject, not both", ErrUnknownSchema)
	case ref.ID < 0 || ref.Version < 0:
		return nil, fmt.Errorf("%w: %s: ids and versions are positive", ErrUnknownSchema, ref)
	case ref.ID != 0:
		return e.byIDCached(ctx, ref.ID)
	case ref.Subject == "":
		return nil, fmt.Errorf("%w: no schema id or subject", ErrUnknownSchema)
	}
	key := subver{ref.Subject, ref.Version}
	if s := e.subverCached(key); s != nil {
		return s, nil
	}
	v, err := e.flight(ctx, "s\x00"+ref.Subject+"\x00"+strconv.Itoa(ref.Version), func(ctx context.Context) (any, error) {
		// A flight that ended just before this one started may have stored it.
		if s := e.subverCached(key); s != nil {
			return s, nil
		}
		version := ref.Version
		if version == 0 {
			version = -1 // the registry's "latest"
		}
		ss, err := e.cl.SchemaByVersion(ctx, ref.Subject, version)
		if err != nil {
			return nil, classify(err, ref.String())
		}
		s, err := e.store(ctx, ss.ID, ss.Schema)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		e.bySubver[key] = subverEntry{id: ss.ID, fetched: time.Now()}
		e.mu.Unlock()
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*schema), nil
}

// subverCached is the cached schema of a subject's version, if it is there and fresh.
func (e *Encoder) subverCached(key subver) *schema {
	e.mu.RLock()
	defer e.mu.RUnlock()
	ent, ok := e.bySubver[key]
	if !ok || (key.version == 0 && time.Since(ent.fetched) >= e.ttl) {
		return nil
	}
	return e.byID[ent.id]
}

func (e *Encoder) idCached(id int) *schema {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.byID[id]
}

func (e *Encoder) byIDCached(ctx context.Context, id int) (*schema, error) {
	if s := e.idCached(id); s != nil {
		return s, nil
	}
	v, err := e.flight(ctx, "i\x00"+strconv.Itoa(id), func(ctx context.Context) (any, error) {
		if s := e.idCached(id); s != nil {
			return s, nil
		}
		sc, err := e.cl.SchemaByID(ctx, id)
		if err != nil {
			return nil, classify(err, "schema id "+strconv.Itoa(id))
		}
		return e.store(ctx, id, sc)
	})
	if err != nil {
		return nil, err
	}
	return v.(*schema), nil
}

// store compiles a schema the registry returned, with the schemas it references (fetched,
// or cached, by refs.go), and caches it by id (a compiled schema already there wins: ids are
// immutable). Failures are not cached.
func (e *Encoder) store(ctx context.Context, id int, sc sr.Schema) (*schema, error) {
	if s := e.idCached(id); s != nil {
		return s, nil
	}
	deps, err := e.references(ctx, id, sc)
	if err != nil {
		return nil, err
	}
	s, err := compile(id, sc, deps)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if old := e.byID[id]; old != nil {
		s = old
	} else {
		e.byID[id] = s
	}
	e.mu.Unlock()
	return s, nil
}

// flight runs fn once for all concurrent callers of key. fn runs with the Encoder's timeout
// and without the first caller's cancellation, so that one caller giving up does not fail
// the others; each caller still returns when its own ctx is done.
func (e *Encoder) flight(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	ch := e.flights.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.timeout)
		defer cancel()
		return fn(fctx)
	})
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}
