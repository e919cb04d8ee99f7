package sqltxn

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// CommitPreparedMany commits several prepared transactions of one database in one round trip:
// each COMMIT PREPARED is its own pipelined request with its own sync point (COMMIT PREPARED
// cannot run inside a transaction block, implicit or not). errs[i] is gids[i]'s outcome; a
// non-nil one leaves that gid to CommitPrepared, which is idempotent (I4) and resolves a gid
// that is gone by its marker. A broken connection fails every gid not answered yet.
func (d *Databases) CommitPreparedMany(ctx context.Context, database string, gids []string) []error {
	errs := make([]error, len(gids))
	fail := func(from int, err error) []error {
		for i := from; i < len(errs); i++ {
			if errs[i] == nil {
				errs[i] = classify(database, err)
			}
		}
		return errs
	}
	db, err := d.db(database)
	if err != nil {
		return fail(0, err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fail(0, fmt.Errorf("acquire connection: %w", err))
	}
	defer conn.Release()
	p := conn.Conn().PgConn().StartPipeline(ctx)
	for _, gid := range gids {
		p.SendQueryParams("COMMIT PREPARED "+quoteGID(gid), nil, nil, nil, nil)
		p.SendPipelineSync()
	}
	if err := p.Flush(); err != nil {
		_ = p.Close()
		conn.Conn().Close(context.WithoutCancel(ctx)) // its state is unknown: never reused
		return fail(0, fmt.Errorf("commit prepared (pipelined): %w", err))
	}
	i := 0
	for i < len(gids) {
		res, err := p.GetResults()
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe):
			errs[i] = classify(database, fmt.Errorf("COMMIT PREPARED %s: %w", gids[i], err))
			continue // the server skips to the sync point, which comes next
		case err != nil:
			_ = p.Close()
			conn.Conn().Close(context.WithoutCancel(ctx))
			return fail(i, fmt.Errorf("commit prepared (pipelined): %w", err))
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			if _, err := r.Close(); err != nil {
				errs[i] = classify(database, fmt.Errorf("COMMIT PREPARED %s: %w", gids[i], err))
			}
		case *pgconn.PipelineSync:
			i++
		case nil:
			_ = p.Close()
			conn.Conn().Close(context.WithoutCancel(ctx))
			return fail(i, errors.New("commit prepared (pipelined): results ended early"))
		}
	}
	if err := p.Close(); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx))
	}
	return errs
}
