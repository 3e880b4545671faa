// Package netfault is a TCP proxy that can cut the network between a client
// and a server the way a partition does, for tests: while cut, no byte
// passes either way and new connections get no answer, yet nothing is
// closed; once healed, the held bytes are delivered (as TCP would retransmit
// them) and the connections go on.
package netfault

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
)

// Proxy forwards the TCP connections it accepts to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu   sync.Mutex
	open chan struct{} // closed while the network is healthy
	done chan struct{}
	wg   sync.WaitGroup
}

// Listen starts a proxy to target on a free loopback port.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, open: make(chan struct{}), done: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port is the proxy's port on 127.0.0.1.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port())) }

// Cut stops every byte both ways, on existing and new connections.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already cut
	}
}

// Heal lets the bytes through again, the held ones first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.ln.Close()
	p.Heal()
	p.wg.Wait()
}

// pass waits until the network lets bytes through (false: the proxy closed).
func (p *Proxy) pass() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	if !p.pass() { // a new connection during a cut gets no answer
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	server, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.copy(server, client); server.Close() }()
	go func() { defer wg.Done(); p.copy(client, server); client.Close() }()
	go func() {
		select {
		case <-p.done:
			client.Close()
			server.Close()
		case <-ctx.Done():
		}
	}()
	wg.Wait()
}

// copy forwards src to dst, holding every chunk while the network is cut.
func (p *Proxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
