package sqltxn

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// maxExactInt is the largest integer a float64 (a JSON number as most clients read it) holds
// exactly.
const maxExactInt = 1 << 53

// jsonValue makes a column value of a RETURNING row safe to store in the log and to answer as
// JSON, without losing anything: a number whose value survives a float64 round trip stays a
// number, written as PostgreSQL wrote it; any other number (numeric beyond float64's range or
// precision, NaN, ±Infinity, a bigint beyond 2^53) becomes its PostgreSQL text as a string.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int16, int32, []byte:
		return v
	case int64:
		if x > maxExactInt || x < -maxExactInt {
			return strconv.FormatInt(x, 10)
		}
		return x
	case float64:
		return floatValue(x, 64)
	case float32:
		return floatValue(float64(x), 32)
	case pgtype.Numeric:
		return numericValue(x)
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprint(v)
	}
	return v
}

func floatValue(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if bits == 32 {
		return float32(f)
	}
	return f
}

func numericValue(n pgtype.Numeric) any {
	switch {
	case !n.Valid:
		return nil
	case n.NaN:
		return "NaN"
	case n.InfinityModifier == pgtype.Infinity:
		return "Infinity"
	case n.InfinityModifier == pgtype.NegativeInfinity:
		return "-Infinity"
	}
	v, err := n.Value()
	if err != nil {
		return fmt.Sprint(n)
	}
	text, _ := v.(string)
	exact, ok := new(big.Rat).SetString(text)
	if !ok {
		return text
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return text
	}
	back, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if back == nil || back.Cmp(exact) != 0 {
		return text
	}
	return json.Number(text) // as PostgreSQL wrote it (12.50 stays 12.50)
}
