package sqlpolicy

import "testing"

func TestShareable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stmt string
		want bool
	}{
		{"INSERT INTO orders (id, total) VALUES ($1, $2)", true},
		{"UPDATE accounts SET balance = balance - $1 WHERE id = $2", true},
		{"DELETE FROM carts WHERE id = $1", true},
		{"SELECT id, total FROM orders WHERE id = $1 FOR UPDATE", true},
		{"WITH x AS (INSERT INTO a VALUES (1) RETURNING id) SELECT * FROM x", true},
		{"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v", true},
		{"VALUES (1), (2)", true},
		{"SELECT 1 INTO copy_of_one", false},
		{"CREATE TABLE t (id int)", false},
		{"ALTER TABLE t ADD COLUMN v int", false},
		{"SET LOCAL search_path = other", false},
		{"LOCK TABLE orders IN ACCESS EXCLUSIVE MODE", false},
		{"CALL do_things()", false},
		{"DO $$ BEGIN NULL; END $$", false},
		{"DECLARE c CURSOR FOR SELECT 1", false},
		{"TRUNCATE orders", false},
		{"COPY orders FROM STDIN", false},
		{"SELECT 1; SELECT 2", false},
		{"SELEC nonsense", false},
	}
	for _, c := range cases {
		t.Run(c.stmt, func(t *testing.T) {
			t.Parallel()
			if got := Shareable(c.stmt); got != c.want {
				t.Fatalf("Shareable(%q) = %v, want %v", c.stmt, got, c.want)
			}
			if got := Shareable(c.stmt); got != c.want { // cached answer
				t.Fatalf("cached Shareable(%q) = %v, want %v", c.stmt, got, c.want)
			}
		})
	}
}
