package txntype

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// check validates one record's key, value, headers and timestamp and resolves every part that
// does not name a statement's result (P1). nSQL is the number of the request's statements, which
// a reference must stay within.
func (r *Record) check(field string, nSQL int) error {
	for _, part := range []struct {
		name string
		p    *Payload
	}{{"key", r.Key}, {"value", r.Value}} {
		if part.p == nil || part.p.resolved {
			continue // a plain string is resolved as it is read
		}
		if err := part.p.check(field+"."+part.name, nSQL); err != nil {
			return err
		}
	}
	for i := range r.Headers {
		if err := r.Headers[i].check(field+".headers["+strconv.Itoa(i)+"]", nSQL); err != nil {
			return err
		}
	}
	if r.Timestamp != nil {
		if err := r.Timestamp.parse(); err != nil {
			return Invalid(field+".timestamp", err.Error())
		}
	}
	return nil
}

// check validates a payload's form; the pure types are resolved here.
func (p *Payload) check(field string, nSQL int) error {
	if p.resolved {
		return nil
	}
	if p.Type == "" {
		return Invalid(field+".type", "required in a typed key or value: one of "+PayloadTypes)
	}
	if up := PayloadType(strings.ToLower(string(p.Type))); strings.ToUpper(string(up)) == string(p.Type) && up.known() {
		p.Type = up // Confluent REST Proxy v3 writes the types in capitals (BINARY, JSON, AVRO)
	}
	if !p.Type.known() {
		return Invalid(field+".type", fmt.Sprintf("unknown type %q: one of %s", truncateText(string(p.Type), 40), PayloadTypes))
	}
	hasData := len(p.Data) > 0
	switch {
	case hasData && p.From != "":
		return Invalid(field, `give either "data" or "from", not both`)
	case !hasData && p.From == "":
		return Invalid(field+".data", `required (or "from", naming a statement's result)`)
	}
	if err := p.checkSchemaRef(field); err != nil {
		return err
	}
	if p.From != "" {
		if _, err := parseRef(p.From, nSQL); err != nil {
			return Invalid(field+".from", err.Error())
		}
		return nil
	}
	b, err := pureBytes(p.Type, p.Data)
	if err != nil {
		return Invalid(field+".data", err.Error())
	}
	if !p.Type.Schema() {
		p.Resolve(b)
	}
	return nil
}

// pureBytes is the payload of a type that needs no schema, from its data; for a schema type, the
// data as compact JSON.
func pureBytes(t PayloadType, data json.RawMessage) ([]byte, error) {
	switch t {
	case TypeBinary:
		s, ok := jsonString(data)
		if !ok {
			return nil, fmt.Errorf("must be a string of standard base64 for type binary, not %s", jsonKindOf(data))
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("not standard base64 (RFC 4648, with padding): %v", err)
		}
		return b, nil
	case TypeString:
		s, ok := jsonString(data)
		if !ok {
			return nil, fmt.Errorf("must be a string for type string, not %s", jsonKindOf(data))
		}
		return []byte(s), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	return buf.Bytes(), nil
}

func (p *Payload) checkSchemaRef(field string) error {
	if !p.Type.Schema() {
		switch {
		case p.SchemaID != nil, p.Subject != "", p.Version != nil:
			return Invalid(field, fmt.Sprintf("schema_id, subject and version apply to avro, protobuf and jsonschema only, not %s", p.Type))
		case p.Message != "":
			return Invalid(field+".message", "applies to type protobuf only")
		}
		return nil
	}
	switch {
	case p.SchemaID != nil && p.Subject != "":
		return Invalid(field, "give either schema_id or subject, not both")
	case p.SchemaID == nil && p.Subject == "":
		return Invalid(field+".schema_id", fmt.Sprintf("type %s needs schema_id or subject", p.Type))
	case p.SchemaID != nil && *p.SchemaID <= 0:
		return Invalid(field+".schema_id", "must be a positive schema id")
	case p.Version != nil && p.Subject == "":
		return Invalid(field+".version", "applies with subject only")
	case p.Version != nil && *p.Version <= 0:
		return Invalid(field+".version", "must be a positive version (leave it out for the latest)")
	case p.Message != "" && p.Type != TypeProtobuf:
		return Invalid(field+".message", "applies to type protobuf only")
	}
	return nil
}

// schemaRef is the payload's schema reference.
func (p *Payload) SchemaRef() SchemaRef {
	var ref SchemaRef
	if p.SchemaID != nil {
		ref.ID = int(*p.SchemaID)
	}
	ref.Subject = p.Subject
	if p.Version != nil {
		ref.Version = int(*p.Version)
	}
	ref.Message = p.Message
	return ref
}

func (h *Header) check(field string, nSQL int) error {
	switch {
	case h.bad != "":
		return Invalid(field, h.bad)
	case h.form == headerB64:
		b, err := base64.StdEncoding.Strict().DecodeString(h.raw)
		if err != nil {
			return Invalid(field+".value_b64", fmt.Sprintf("not standard base64 (RFC 4648, with padding): %v", err))
		}
		h.Value = b
	case h.form == headerFrom:
		if _, err := parseRef(h.From, nSQL); err != nil {
			return Invalid(field+".from", err.Error())
		}
	}
	return nil
}

func jsonString(data json.RawMessage) (string, bool) {
	if len(data) == 0 || data[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return "", false
	}
	return s, true
}

func jsonKindOf(data json.RawMessage) string {
	if len(data) == 0 {
		return "nothing"
	}
	switch data[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// resultRef names a statement's result: a whole row (column empty) or one column of it.
type resultRef struct {
	stmt, row int
	column    string
}

// parseRef reads "sql[i].rows[j]", "sql[i].rows[j].column" or `sql[i].rows[j]["column"]`. i
// must name one of the request's nSQL statements (they all run before any record is produced).
func parseRef(s string, nSQL int) (resultRef, error) {
	const form = `a reference is sql[i].rows[j], sql[i].rows[j].column or sql[i].rows[j]["column"]`
	var ref resultRef
	rest, ok := strings.CutPrefix(s, "sql[")
	if !ok {
		return ref, fmt.Errorf("%q: %s", truncateText(s, 60), form)
	}
	var err error
	if ref.stmt, rest, err = index(rest); err != nil {
		return ref, fmt.Errorf("%q: %s", truncateText(s, 60), form)
	}
	if rest, ok = strings.CutPrefix(rest, ".rows["); !ok {
		return ref, fmt.Errorf("%q: %s", truncateText(s, 60), form)
	}
	if ref.row, rest, err = index(rest); err != nil {
		return ref, fmt.Errorf("%q: %s", truncateText(s, 60), form)
	}
	switch {
	case rest == "":
	case strings.HasPrefix(rest, ".") && len(rest) > 1 && !strings.ContainsAny(rest[1:], ".[]\""):
		ref.column = rest[1:]
	case strings.HasPrefix(rest, "[\"") && strings.HasSuffix(rest, "\"]"):
		if err := json.Unmarshal([]byte(rest[1:len(rest)-1]), &ref.column); err != nil || ref.column == "" {
			return ref, fmt.Errorf("%q: the column name is not a JSON string", truncateText(s, 60))
		}
	default:
		return ref, fmt.Errorf("%q: %s", truncateText(s, 60), form)
	}
	if ref.stmt >= nSQL {
		return ref, fmt.Errorf("%q names statement %d, but the request has %d (sql[0] to sql[%d])", truncateText(s, 60), ref.stmt, nSQL, nSQL-1)
	}
	return ref, nil
}

// index reads "N]" and returns N and what follows.
func index(s string) (int, string, error) {
	end := strings.IndexByte(s, ']')
	if end <= 0 || end > 6 {
		return 0, "", fmt.Errorf("no index")
	}
	n, err := strconv.Atoi(s[:end])
	if err != nil || n < 0 || (len(s[:end]) > 1 && s[0] == '0') {
		return 0, "", fmt.Errorf("bad index")
	}
	return n, s[end+1:], nil
}

// Derived reports whether a record of the request names a statement's result (P2): its records
// can be produced only after its statements ran.
func (r *Request) Derived() bool {
	for i := range r.Kafka {
		if r.Kafka[i].derived() {
			return true
		}
	}
	return false
}

func (r *Record) derived() bool {
	if r.Key != nil && r.Key.From != "" || r.Value != nil && r.Value.From != "" {
		return true
	}
	for _, h := range r.Headers {
		if h.form == headerFrom {
			return true
		}
	}
	return false
}

// WireSize is the size of the record in a record batch of its own, as Kafka counts it against
// max.message.bytes (uncompressed: the record batch header, then the record). ok is false while a
// part is not resolved.
func (r *Record) WireSize() (size int, ok bool) {
	body := 1 + 1 + 1 // attributes, timestamp delta, offset delta (0 in a batch of one)
	for _, p := range []*Payload{r.Key, r.Value} {
		if p == nil {
			body++ // length -1
			continue
		}
		b, done := p.Resolved()
		if !done {
			return 0, false
		}
		body += varintLen(int64(len(b))) + len(b)
	}
	body += varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		if h.form == headerFrom && !h.done {
			return 0, false
		}
		body += varintLen(int64(len(h.Name))) + len(h.Name)
		if h.Value == nil {
			body++
		} else {
			body += varintLen(int64(len(h.Value))) + len(h.Value)
		}
	}
	return recordBatchOverhead + varintLen(int64(body)) + body, true
}

// recordBatchOverhead is the header of a v2 record batch.
const recordBatchOverhead = 61

func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63) // zigzag
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
