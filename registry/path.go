package registry

import (
	"bytes"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// formatPath writes the steps into a value as `customer.id` or `items[1].price`: isIndex(i)
// says whether step i is an array position.
func formatPath(steps []string, isIndex func(i int) bool) string {
	var b strings.Builder
	for i, s := range steps {
		if isIndex(i) {
			b.WriteByte('[')
			b.WriteString(s)
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// pathAt names the value of data that contains byte offset off (a library's error position):
// the member name or array element the token at off belongs to. It reads data with a JSON
// tokenizer (go-json-experiment's jsontext), which tracks the position in the tree.
func pathAt(data []byte, off int) string {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	var steps []string
	var kinds []byte
	for {
		if _, err := dec.ReadToken(); err != nil {
			break
		}
		depth := dec.StackDepth()
		steps = steps[:0]
		kinds = kinds[:0]
		for t := range dec.StackPointer().Tokens() {
			steps = append(steps, t)
		}
		for i := 1; i <= depth && i <= len(steps); i++ {
			k, _ := dec.StackIndex(i)
			kinds = append(kinds, byte(k))
		}
		if dec.InputOffset() > int64(off) {
			break
		}
	}
	return formatPath(steps, func(i int) bool { return i < len(kinds) && kinds[i] == '[' })
}
