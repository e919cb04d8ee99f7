package registry

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Schema references: a schema may name schemas of other subjects (Confluent's "references":
// name, subject, version), and those others in turn. The referenced schemas are fetched
// from the registry, each (subject, version) once, and handed to the format's compiler with
// the referencing schema:
//
//   - Protobuf: the name is the import path; protocompile's resolver reads the imported
//     files from the referenced texts (Google's well-known imports are built in: a
//     reference naming one is not fetched).
//   - Avro: the name is the full name of a named type; the named types the referenced
//     schemas define are inlined where the schema first uses them (avrorefs.go).
//   - JSON Schema: the name is what a "$ref" says; each referenced document is a resource
//     of the compiler under that name.
//
// A referenced numbered version never changes, so its text is cached for the life of the
// Encoder, like schemas by id; a reference to a subject's latest version (version -1, which
// some registries keep) is fetched each time a schema naming it is compiled. The walk is
// bounded: at most maxRefDepth references deep and maxRefCount schemas in all, and a
// schema that references itself, directly or not, is refused naming the chain.
const (
	maxRefDepth = 16
	maxRefCount = 256
)

// dep is one schema referenced, directly or through others, by the schema being compiled.
type dep struct {
	name    string // the reference's name: an import path, a full name, a $ref
	subject string
	version int
	schema  sr.Schema
}

func (d dep) String() string {
	return fmt.Sprintf("%q (subject %q version %d)", d.name, d.subject, d.version)
}

// references fetches the schemas sc references, recursively: each (subject, version) once,
// in dependency order (a schema after the schemas it references). id is sc's schema id,
// for the errors.
func (e *Encoder) references(ctx context.Context, id int, sc sr.Schema) ([]dep, error) {
	if len(sc.References) == 0 {
		return nil, nil
	}
	w := refWalk{e: e, root: "schema id " + strconv.Itoa(id), typ: sc.Type, done: map[subver]bool{}}
	if err := w.walk(ctx, sc, nil); err != nil {
		return nil, err
	}
	return w.deps, nil
}

type refWalk struct {
	e    *Encoder
	root string          // the schema compiled, for the errors
	typ  sr.SchemaType   // its format: the references' too
	done map[subver]bool // fetched with all they reference
	n    int             // schemas fetched
	deps []dep
}

// walk fetches sc's references and theirs, depth first; chain is the path from the root to
// sc.
func (w *refWalk) walk(ctx context.Context, sc sr.Schema, chain []dep) error {
	for _, r := range sc.References {
		if w.typ == sr.TypeProtobuf && wellKnownProto(r.Name) {
			continue // protocompile has it built in
		}
		d := dep{name: r.Name, subject: r.Subject, version: r.Version}
		path := append(chain[:len(chain):len(chain)], d)
		key := subver{r.Subject, r.Version}
		for _, c := range chain {
			if c.subject == r.Subject && c.version == r.Version {
				return fmt.Errorf("%w: %s: the references form a cycle: %s", ErrUnsupportedSchema, w.root, w.chain(path))
			}
		}
		if w.done[key] {
			continue
		}
		if len(path) > maxRefDepth {
			return fmt.Errorf("%w: %s: references nested more than %d deep: %s", ErrUnsupportedSchema, w.root, maxRefDepth, w.chain(path))
		}
		if w.n >= maxRefCount {
			return fmt.Errorf("%w: %s: more than %d referenced schemas in all (the %dth: %s)", ErrUnsupportedSchema, w.root, maxRefCount, maxRefCount+1, w.chain(path))
		}
		if r.Subject == "" || r.Name == "" {
			return fmt.Errorf("%w: %s: reference without a name or subject: %s", ErrUnsupportedSchema, w.root, w.chain(path))
		}
		w.n++
		ref, err := w.e.refSchema(ctx, r.Subject, r.Version)
		if err != nil {
			return classify(err, "reference "+w.chain(path))
		}
		if ref.Type != w.typ {
			return fmt.Errorf("%w: %s: reference %s is a %s schema, not %s", ErrUnsupportedSchema, w.root, w.chain(path), ref.Type, w.typ)
		}
		if err := w.walk(ctx, ref, path); err != nil {
			return err
		}
		w.done[key] = true
		d.schema = ref
		w.deps = append(w.deps, d)
	}
	return nil
}

// chain names the references from the root: `schema id 7 → "a.proto" (subject "a" version
// 1) → ...`.
func (w *refWalk) chain(path []dep) string {
	var b strings.Builder
	b.WriteString(w.root)
	for _, d := range path {
		b.WriteString(" → ")
		b.WriteString(d.String())
	}
	return b.String()
}

// refSchema is a referenced subject's version, cached for good when numbered; concurrent
// callers share one request. Errors are the client's, unclassified.
func (e *Encoder) refSchema(ctx context.Context, subject string, version int) (sr.Schema, error) {
	key := subver{subject, version}
	cached := func() (sr.Schema, bool) {
		if version <= 0 {
			return sr.Schema{}, false
		}
		e.mu.RLock()
		defer e.mu.RUnlock()
		sc, ok := e.refTexts[key]
		return sc, ok
	}
	if sc, ok := cached(); ok {
		return sc, nil
	}
	v, err := e.flight(ctx, "r\x00"+subject+"\x00"+strconv.Itoa(version), func(ctx context.Context) (any, error) {
		if sc, ok := cached(); ok {
			return sc, nil
		}
		ask := version
		if ask <= 0 {
			ask = -1 // the registry's "latest"
		}
		ss, err := e.cl.SchemaByVersion(ctx, subject, ask)
		if err != nil {
			return nil, err
		}
		if version > 0 {
			e.mu.Lock()
			e.refTexts[key] = ss.Schema
			e.mu.Unlock()
		}
		return ss.Schema, nil
	})
	if err != nil {
		return sr.Schema{}, err
	}
	return v.(sr.Schema), nil
}

// wellKnownProto says whether name is one of Google's well-known .proto files, which
// protocompile provides (those linked into this program).
func wellKnownProto(name string) bool {
	if !strings.HasPrefix(name, "google/protobuf/") {
		return false
	}
	_, err := protoregistry.GlobalFiles.FindFileByPath(name)
	return err == nil
}
