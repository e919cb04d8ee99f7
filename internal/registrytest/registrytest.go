// Package registrytest registers schemas for a test on a schema registry that other tests,
// and other test packages, use at the same time.
//
// Each registration's content is made the subject's own. A registry keeps one content row for
// identical texts, and Apicurio's storage deletes a content row that no version uses any more
// when a subject is hard-deleted: a test deleting its subject at its end could remove the row
// another test's registration of the same text had just found, and that registration failed
// with a foreign key violation. Content unique to the subject shares nothing.
package registrytest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

// Register registers s under subject, its content made the subject's own (Unique), and
// deletes the subject at the test's end. It returns what the registry answered.
func Register(t testing.TB, cl *sr.Client, subject string, s sr.Schema) sr.SubjectSchema {
	t.Helper()
	ss, err := Create(context.Background(), cl, subject, s)
	require.NoError(t, err, "register %s", subject)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cl.DeleteSubject(ctx, subject, sr.SoftDelete)
		_, _ = cl.DeleteSubject(ctx, subject, sr.HardDelete)
	})
	return ss
}

// Create registers s under subject, its content made the subject's own (Unique), asking again
// when Apicurio answers that the subject it is creating does not exist: seen under parallel
// registrations and deletions of other subjects (its in-memory storage), never for a request
// that then fails again. The caller deletes the subject.
func Create(ctx context.Context, cl *sr.Client, subject string, s sr.Schema) (sr.SubjectSchema, error) {
	s = Unique(subject, s)
	for attempt := 0; ; attempt++ {
		ss, err := cl.CreateSchema(ctx, subject, s)
		if err == nil || attempt == 4 || !strings.Contains(err.Error(), "No artifact with ID") {
			return ss, err
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
}

// Unique returns s with subject written into its text where the format ignores it: a
// "test_subject" attribute of an Avro schema that is a JSON object (Avro keeps attributes it
// does not define as properties), a "$comment" of a JSON schema that is an object, a comment
// line at the end of a Protobuf file. Any other text is returned as it is.
func Unique(subject string, s sr.Schema) sr.Schema {
	switch s.Type {
	case sr.TypeProtobuf:
		s.Schema = strings.TrimRight(s.Schema, "\n") + "\n// " + strings.ReplaceAll(subject, "\n", " ") + "\n"
	case sr.TypeAvro, sr.TypeJSON:
		body, ok := strings.CutPrefix(strings.TrimSpace(s.Schema), "{")
		if !ok {
			return s
		}
		key := `"test_subject"`
		if s.Type == sr.TypeJSON {
			key = `"$comment"`
		}
		sep := ", "
		if strings.TrimSpace(body) == "}" {
			sep = ""
		}
		quoted, _ := json.Marshal(subject) // a string always encodes
		s.Schema = "{" + key + ": " + string(quoted) + sep + body
	}
	return s
}
