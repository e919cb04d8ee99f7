package test

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpProxy forwards bytes between the coordinator and a PostgreSQL server, and can hold back
// the server's answers (freeze): what the server sends meanwhile is delivered at thaw, or never
// when the client has given up and closed. It knows nothing of the protocol.
type tcpProxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	frozen bool
	thawed *sync.Cond
}

func startProxy(t *testing.T, upstream string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, upstream: upstream}
	p.thawed = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		p.thaw()
		_ = ln.Close()
	})
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *tcpProxy) pipe(client net.Conn) {
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	closeBoth := func() {
		_ = client.Close()
		_ = server.Close()
	}
	go func() {
		_, _ = io.Copy(server, client)
		closeBoth()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	closeBoth()
}

// wait blocks while the proxy is frozen.
func (p *tcpProxy) wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen {
		p.thawed.Wait()
	}
}

// freeze holds back every answer of the server from now on.
func (p *tcpProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// thaw delivers what was held back and forwards again.
func (p *tcpProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
	p.thawed.Broadcast()
}
