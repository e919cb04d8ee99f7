package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
	"github.com/linkedin/goavro/v2"
)

// Avro logical types in the JSON the coordinator takes. Avro's JSON encoding, which
// Confluent's REST Proxy takes, writes a logical type as its underlying type: a timestamp as
// a long, a date as an int, a decimal as the bytes (a string of code points 0-255) of its
// unscaled value in big-endian two's complement. That form always works. Where the
// underlying type makes it unambiguous, a convenient form is taken too, and turned into
// Avro's before goavro reads the data (the walk of avronumbers.go, which checks the numbers,
// replaces them):
//
//	decimal (bytes, fixed)  the bytes' string, or a JSON number kept exactly as written:
//	                        12.34 for scale 2 is the unscaled 1234; a number whose value
//	                        needs more fractional digits than the scale is refused (never
//	                        rounded), as is one with more digits than the precision, or,
//	                        on a fixed, one its size does not hold
//	timestamp-millis (long) epoch milliseconds, or an RFC 3339 time with an offset; one finer
//	timestamp-micros (long) than the unit (a microsecond for millis) is refused
//	date (int)              days since 1970-01-01, or "YYYY-MM-DD"
//	time-millis (int)       milliseconds after midnight (0 to 86399999), or "HH:MM:SS[.fff]"
//	time-micros (long)      microseconds after midnight, or "HH:MM:SS[.ffffff]"
//	uuid (string)           a string, checked to be a UUID in its 36-character form
//
// The bytes are what Confluent's deserializers read back as the logical value. goavro is
// given the underlying types (stripLogical): its decimal codec reads the same bytes string
// but re-encodes through a big.Rat that silently truncates digits beyond the scale, writes
// zero on a fixed as one byte (refused as the wrong size) and a positive value a fixed
// cannot hold as zeros; its time types name a union's branch "long.timestamp-millis", not
// "long". Decode gives back Avro's JSON: decimals as their bytes' string, the others as
// numbers.

// logicalNode is the check of s, a type of underlying type t with a logical type this
// package reads, or nil: other logical types, and invalid ones (a decimal without a
// precision), are their underlying type, as the specification says.
func (b *avroBuilder) logicalNode(s map[string]any, t string) *avroNode {
	lt, _ := s["logicalType"].(string)
	switch {
	case lt == "decimal" && (t == "bytes" || t == "fixed"):
		b.a.strip = true
		prec, ok := intAttr(s, "precision")
		scale, sok := intAttr(s, "scale")
		if _, has := s["scale"]; !has {
			scale, sok = 0, true
		}
		size, zok := intAttr(s, "size")
		if ok && sok && prec >= 1 && scale >= 0 && scale <= prec && (t == "bytes" || zok && size >= 1) {
			b.a.logical = true
			return &avroNode{kind: avroLogical, typ: t, logical: lt, precision: prec, scale: scale, size: size}
		}
		fallthrough // an invalid decimal is its bytes
	case t == "bytes" || t == "fixed":
		// Bytes are read here too: goavro misreads a string beyond ASCII (bytesValue).
		b.a.logical = true
		n := &avroNode{kind: avroLogical, typ: t}
		if t == "fixed" {
			n.size, _ = intAttr(s, "size")
		}
		return n
	case (lt == "timestamp-millis" || lt == "timestamp-micros" || lt == "time-micros") && t == "long",
		(lt == "date" || lt == "time-millis") && t == "int",
		lt == "uuid" && t == "string":
		b.a.logical = true
		b.a.strip = b.a.strip || lt != "uuid"
		return &avroNode{kind: avroLogical, typ: t, logical: lt}
	}
	return nil
}

func intAttr(s map[string]any, k string) (int, bool) {
	f, ok := s[k].(float64)
	if !ok || f != float64(int(f)) || f > 1e6 || f < -1e6 {
		return 0, false
	}
	return int(f), true
}

// stripLogical is the schema text without the logical types this package reads (but
// uuid, a string to goavro too), for goavro: the underlying types carry the values this
// package prepared. goavro's own logical types would name a union's branch
// "long.timestamp-millis" where Avro's JSON (and REST Proxy) says "long", and its decimal
// re-encodes through a big.Rat (see above).
func stripLogical(text string) (string, error) {
	tree, err := avroJSON(text)
	if err != nil {
		return "", err
	}
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if lt, ok := v["logicalType"].(string); ok && strippedLogical[lt] {
				delete(v, "logicalType")
			}
			for _, x := range v {
				strip(x)
			}
		case []any:
			for _, x := range v {
				strip(x)
			}
		}
	}
	strip(tree)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return "", err
	}
	return b.String(), nil
}

var strippedLogical = map[string]bool{
	"decimal": true, "timestamp-millis": true, "timestamp-micros": true, "date": true, "time-millis": true, "time-micros": true,
}

// logicalValue checks v, a value of logical type n, and returns Avro's JSON for it when it
// is written in a convenient form (nil: v is Avro's JSON already, or not of a form this
// check reads, for goavro to refuse).
func (n *avroNode) logicalValue(v jsontext.Value, p *avroPath) ([]byte, error) {
	switch v.Kind() {
	case '0':
		return n.logicalNumber(v, p)
	case '"':
		if n.typ == "bytes" || n.typ == "fixed" {
			b, repl, err := n.bytesValue(v, p)
			if err == nil && b != nil && n.logical == "decimal" {
				err = n.decimalBytes(b, p)
			}
			return repl, err
		}
		if n.logical == "" {
			return nil, nil
		}
		s, err := jsontext.AppendUnquote(nil, v)
		if err != nil {
			return nil, nil
		}
		return n.logicalString(string(s), p)
	case 'n':
		if n.typ != "string" && n.typ != "bytes" && n.typ != "fixed" {
			return nil, checkAvroNumber(n.typ, v, p) // null for an int or a long, named
		}
	}
	return nil, nil
}

// Bounds of the times of day.
const (
	dayMillis = 24 * 60 * 60 * 1000
	dayMicros = dayMillis * 1000
)

func (n *avroNode) logicalNumber(v jsontext.Value, p *avroPath) ([]byte, error) {
	switch n.logical {
	case "decimal":
		unscaled, reason := decimalUnscaled(string(v), n.precision, n.scale)
		if reason != "" {
			return nil, p.mismatch(reason)
		}
		b, ok := twosComplement(unscaled, n.size)
		if !ok {
			return nil, p.mismatch(fmt.Sprintf("%s does not fit fixed size %d of decimal(%d,%d)", shown(v), n.size, n.precision, n.scale))
		}
		return avroBytesText.TextualFromNative(nil, b)
	case "uuid", "":
		return nil, nil // goavro says what it takes
	}
	if err := checkAvroNumber(n.typ, v, p); err != nil {
		return nil, err
	}
	var limit int64
	switch n.logical {
	case "time-millis":
		limit = dayMillis
	case "time-micros":
		limit = dayMicros
	default:
		return nil, nil
	}
	if i, err := strconv.ParseInt(string(v), 10, 64); err != nil || i < 0 || i >= limit {
		return nil, p.mismatch(fmt.Sprintf("%s is not a time of day: %s takes 0 to %d", shown(v), n.logical, limit-1))
	}
	return nil, nil
}

func (n *avroNode) logicalString(s string, p *avroPath) ([]byte, error) {
	switch n.logical {
	case "uuid":
		if _, err := uuid.Parse(s); err != nil || len(s) != 36 {
			return nil, p.mismatch(fmt.Sprintf("%q is not a UUID (8-4-4-4-12 hexadecimal digits)", s))
		}
		return nil, nil
	case "timestamp-millis", "timestamp-micros":
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, p.mismatch(fmt.Sprintf("%s takes epoch %s as a number or an RFC 3339 time (2026-01-02T03:04:05.123Z), not %q",
				n.logical, unitWord(n.logical), s))
		}
		if n.logical == "timestamp-millis" {
			if t.Nanosecond()%int(time.Millisecond) != 0 {
				return nil, p.mismatch(fmt.Sprintf("%q is finer than the milliseconds of timestamp-millis (it is not rounded)", s))
			}
			return strconv.AppendInt(nil, t.UnixMilli(), 10), nil
		}
		if t.Nanosecond()%int(time.Microsecond) != 0 {
			return nil, p.mismatch(fmt.Sprintf("%q is finer than the microseconds of timestamp-micros (it is not rounded)", s))
		}
		return strconv.AppendInt(nil, t.UnixMicro(), 10), nil
	case "date":
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return nil, p.mismatch(fmt.Sprintf("date takes days since 1970-01-01 as a number or a date as \"YYYY-MM-DD\", not %q", s))
		}
		return strconv.AppendInt(nil, t.Unix()/86400, 10), nil
	case "time-millis", "time-micros":
		t, err := time.Parse(time.TimeOnly, s)
		if err != nil || len(s) < 8 || s[2] != ':' || s[5] != ':' || (len(s) > 8 && s[8] != '.') {
			return nil, p.mismatch(fmt.Sprintf("%s takes %s after midnight as a number or a time as \"HH:MM:SS[.fff]\", not %q",
				n.logical, unitWord(n.logical), s))
		}
		ns := int64(t.Hour())*int64(time.Hour) + int64(t.Minute())*int64(time.Minute) + int64(t.Second())*int64(time.Second) + int64(t.Nanosecond())
		unit := int64(time.Millisecond)
		if n.logical == "time-micros" {
			unit = int64(time.Microsecond)
		}
		if ns%unit != 0 {
			return nil, p.mismatch(fmt.Sprintf("%q is finer than the %s of %s (it is not rounded)", s, unitWord(n.logical), n.logical))
		}
		return strconv.AppendInt(nil, ns/unit, 10), nil
	}
	return nil, nil
}

func unitWord(logical string) string {
	if strings.HasSuffix(logical, "micros") {
		return "microseconds"
	}
	return "milliseconds"
}

// avroBytesText is goavro's codec of bytes, for writing bytes as Avro's JSON the way goavro
// reads them back (every code point above 0x7F escaped).
var avroBytesText = func() *goavro.Codec {
	c, err := goavro.NewCodec(`"bytes"`)
	if err != nil {
		panic(err)
	}
	return c
}()

// bytesValue reads a bytes or fixed value written as Avro's JSON, a string (v) of code
// points 0 to 255: the bytes, and the string as goavro reads it right (nil: v is one
// already). goavro takes a \u escape's low byte only (\u20ac as 0xAC) and a character
// written as itself (é) as its UTF-8 bytes, so any string beyond ASCII is written again
// with escapes; a code point beyond 255 is refused.
func (n *avroNode) bytesValue(v jsontext.Value, p *avroPath) (b, repl []byte, err error) {
	raw := v[1 : len(v)-1]
	ascii := !bytes.Contains(raw, []byte(`\u`))
	for _, c := range raw {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii && n.logical != "decimal" {
		return nil, nil, nil
	}
	s, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return nil, nil, nil // not JSON: goavro says so
	}
	b = s[:0]
	for _, r := range string(s) {
		if r > 0xFF {
			return nil, nil, p.mismatch(fmt.Sprintf("%s bytes as a string of code points 0 to 255 (\\u0000 to \\u00ff), not %q", n.bytesWord(), shownString(string(s))))
		}
		b = append(b, byte(r)) // b is behind the reading of s: each rune is a byte at least
	}
	if ascii {
		return b, nil, nil
	}
	repl, err = avroBytesText.TextualFromNative(nil, b)
	if err != nil {
		return nil, nil, nil
	}
	return b, repl, nil
}

func (n *avroNode) bytesWord() string {
	if n.logical == "decimal" {
		return fmt.Sprintf("decimal(%d,%d) takes a number, or its", n.precision, n.scale)
	}
	return "type " + n.typ + " takes its"
}

func shownString(s string) string {
	if utf8.RuneCountInString(s) > 40 {
		return string([]rune(s)[:40]) + "…"
	}
	return s
}

// decimalBytes checks a decimal written as Avro's JSON, its bytes b: its unscaled value
// within the precision. Bytes not of the fixed's size are goavro's to refuse.
func (n *avroNode) decimalBytes(b []byte, p *avroPath) error {
	if len(b) == 0 || (n.size > 0 && len(b) != n.size) {
		return nil
	}
	u := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if digits := len(new(big.Int).Abs(u).String()); digits > n.precision {
		return p.mismatch(fmt.Sprintf("the unscaled value %s has %d digits, beyond the precision of decimal(%d,%d)", u, digits, n.precision, n.scale))
	}
	return nil
}

// decimalUnscaled is the unscaled value of num (a JSON number, as written) at scale, exactly,
// or the reason it has none: a value needing more fractional digits than the scale, or more
// digits than the precision.
func decimalUnscaled(num string, precision, scale int) (*big.Int, string) {
	written := num
	neg := strings.HasPrefix(num, "-")
	num = strings.TrimPrefix(num, "-")
	exp := 0
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		e, err := strconv.Atoi(num[i+1:])
		if err != nil || e > 1_000_000 || e < -1_000_000 {
			return nil, fmt.Sprintf("%s is beyond the precision of decimal(%d,%d)", shown([]byte(written)), precision, scale)
		}
		num, exp = num[:i], e
	}
	intPart, frac, _ := strings.Cut(num, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return new(big.Int), ""
	}
	shift := exp - len(frac) + scale // the unscaled value is digits × 10^shift
	if shift < 0 {
		if -shift >= len(digits) || strings.Trim(digits[len(digits)+shift:], "0") != "" {
			return nil, fmt.Sprintf("%s has more fractional digits than the scale of decimal(%d,%d) takes (it is not rounded)", shown([]byte(written)), precision, scale)
		}
		digits, shift = digits[:len(digits)+shift], 0
	}
	if len(digits)+shift > precision {
		return nil, fmt.Sprintf("%s has more digits than the precision of decimal(%d,%d) takes (%d, %d after the point)",
			shown([]byte(written)), precision, scale, precision, scale)
	}
	u, _ := new(big.Int).SetString(digits+strings.Repeat("0", shift), 10)
	if neg {
		u.Neg(u)
	}
	return u, ""
}

// twosComplement is n in big-endian two's complement: in size bytes (false when it does not
// fit), or with size 0 in the fewest bytes that hold it, as Java's BigInteger.toByteArray
// writes it.
func twosComplement(n *big.Int, size int) ([]byte, bool) {
	mag := n // the bits a positive n needs below its sign bit; for a negative, those of -n-1
	if n.Sign() < 0 {
		mag = new(big.Int).Not(n) // -n-1
	}
	need := mag.BitLen()/8 + 1
	if size == 0 {
		size = need
	} else if need > size {
		return nil, false
	}
	b := make([]byte, size)
	mag.FillBytes(b)
	if n.Sign() < 0 {
		for i := range b {
			b[i] = ^b[i] // -n-1's bits inverted are n's two's complement
		}
	}
	return b, true
}
