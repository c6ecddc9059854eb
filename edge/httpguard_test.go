package edge

import (
	"net"
	"testing"
)

// The Host a loopback listener answers to: the loopback names on its port
// or none; the Origin its view takes: a loopback name on its port, never
// merely the request's own Host.
func TestLoopbackHostsAndOrigins(t *testing.T) {
	h := loopbackHostsOf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4321})
	for host, want := range map[string]bool{
		"127.0.0.1:4321": true, "localhost:4321": true, "LocalHost:4321": true, "[::1]:4321": true,
		"127.0.0.1": true, "localhost": true, "[::1]": true,
		"127.0.0.1:80": false, "localhost:1234": false, "evil.example:4321": false, "evil.example": false,
		"127.0.0.1.nip.io:4321": false, "localhost.:4321": false, "x.localhost:4321": false, "": false,
		"0.0.0.0:4321": false, "10.0.0.1:4321": false,
	} {
		if got := h.allowsHost(host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
	for origin, want := range map[string]bool{
		"http://127.0.0.1:4321": true, "http://localhost:4321": true, "http://[::1]:4321": true,
		"http://127.0.0.1": false, "http://localhost:5173": false, "http://evil.example:4321": false,
		"null": false, "file://": false, "ftp://127.0.0.1:4321": false,
	} {
		if got := h.allowsOrigin(origin); got != want {
			t.Errorf("Origin %q: allowed %v, want %v", origin, got, want)
		}
	}
	if loopbackHostsOf(&net.TCPAddr{IP: net.IPv4zero, Port: 4321}) != nil {
		t.Error("a listener on 0.0.0.0 (tokens required) got a Host check: it answers whatever name its clients use")
	}
	if h := loopbackHostsOf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 80}); !h.allowsHost("127.0.0.2") || !h.allowsHost("localhost:80") {
		t.Error("a listener on 127.0.0.2:80 refuses its own address")
	}
}
