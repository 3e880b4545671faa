package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// An echo server behind the proxy: a line passes when healthy, is held
// while cut (and a new connection gets no answer), and arrives once healed.
func TestCutHoldsAndHealDelivers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(l))
				}
			}()
		}
	}()
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(s string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(s + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := echo("one", 2*time.Second); err != nil || got != "one\n" {
		t.Fatalf("healthy echo: %q %v", got, err)
	}
	p.Cut()
	if got, err := echo("two", 300*time.Millisecond); err == nil {
		t.Fatalf("echo passed a cut network: %q", got)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(300 * time.Millisecond))
	c2.Write([]byte("new\n"))
	if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
		t.Fatal("a new connection was answered during the cut")
	}
	p.Heal()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("held line after heal: %q %v", got, err)
	}
	if got, err := echo("three", 2*time.Second); err != nil || got != "three\n" {
		t.Fatalf("echo after heal: %q %v", got, err)
	}
}
