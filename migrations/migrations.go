// Package migrations holds the coordinator log's schema as golang-migrate SQL files, embedded in
// the binary so that `coordinator serve` and `coordinator migrate` need nothing on disk.
package migrations

import "embed"

// FS holds the numbered *.up.sql / *.down.sql files.
//
//go:embed *.sql
var FS embed.FS
