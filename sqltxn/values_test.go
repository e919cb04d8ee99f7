package sqltxn

import (
	"encoding/json"
	"math"
	"math/big"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func numeric(t *testing.T, s string) pgtype.Numeric {
	t.Helper()
	var n pgtype.Numeric
	require.NoError(t, n.Scan(s))
	return n
}

func TestJSONValueIsLossless(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   func(t *testing.T) any
		want string // the JSON the value encodes to
	}{
		{"small numeric", func(t *testing.T) any { return numeric(t, "10.50") }, `10.5`},
		{"decimal fraction", func(t *testing.T) any { return numeric(t, "1.1") }, `1.1`},
		{"numeric beyond float64", func(*testing.T) any { return pgtype.Numeric{Int: big.NewInt(1), Exp: 400, Valid: true} }, `"1` + zeros(400) + `"`},
		{"numeric beyond float64 precision", func(t *testing.T) any { return numeric(t, "12345678901234567891") }, `"12345678901234567891"`},
		{"numeric NaN", func(t *testing.T) any { return numeric(t, "NaN") }, `"NaN"`},
		{"numeric null", func(t *testing.T) any { return pgtype.Numeric{} }, `null`},
		{"numeric infinity", func(t *testing.T) any {
			return pgtype.Numeric{InfinityModifier: pgtype.Infinity, Valid: true}
		}, `"Infinity"`},
		{"float NaN", func(*testing.T) any { return math.NaN() }, `"NaN"`},
		{"float -Inf", func(*testing.T) any { return math.Inf(-1) }, `"-Infinity"`},
		{"float", func(*testing.T) any { return 2.5 }, `2.5`},
		{"bigint in range", func(*testing.T) any { return int64(1 << 53) }, `9007199254740992`},
		{"bigint beyond 2^53", func(*testing.T) any { return int64(1<<53 + 1) }, `"9007199254740993"`},
		{"text", func(*testing.T) any { return "x" }, `"x"`},
		{"unencodable", func(*testing.T) any { return make(chan int) }, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(jsonValue(tt.in(t)))
			require.NoError(t, err, "every value encodes")
			if tt.want != "" {
				assert.JSONEq(t, tt.want, string(b))
			}
			var back any
			require.NoError(t, json.Unmarshal(b, &back), "and decodes into a plain Go value")
		})
	}
}

func zeros(n int) string {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil).String()[1:]
}
