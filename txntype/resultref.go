package txntype

import (
	"encoding/json"
	"fmt"
)

// How a record reads a statement's result it names (P2).

// Lookup finds the value a reference names: a row (map) or a column's value.
func Lookup(results []SQLResult, from string, nSQL int) (any, error) {
	ref, err := parseRef(from, nSQL)
	if err != nil {
		return nil, err
	}
	if ref.stmt >= len(results) {
		return nil, fmt.Errorf("statement sql[%d] has no result", ref.stmt)
	}
	rows := results[ref.stmt].Rows
	if ref.row >= len(rows) {
		return nil, fmt.Errorf("statement sql[%d] returned %d rows, no row %d (use RETURNING or SELECT)", ref.stmt, len(rows), ref.row)
	}
	row := rows[ref.row]
	if ref.column == "" {
		return row, nil
	}
	v, ok := row[ref.column]
	if !ok {
		return nil, fmt.Errorf("row %d of sql[%d] has no column %q", ref.row, ref.stmt, truncateText(ref.column, 60))
	}
	return v, nil
}

// UUIDText is a uuid's canonical text.
func UUIDText(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// ResultText is the bytes of a column's value as a string or binary payload or a header: text as
// its UTF-8 bytes, bytea as its bytes, a uuid as its 16 bytes, anything else as its JSON text.
func ResultText(v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(x), nil
	case []byte:
		return x, nil
	case [16]byte:
		return x[:], nil
	}
	return json.Marshal(v)
}
