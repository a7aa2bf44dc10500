// Interop client: Go github.com/coder/websocket against `sockscale serve --proto ws`.
//
// Usage: ws_client CA_FILE URL... (ws:// or wss://). For each URL, with and without permessage-deflate:
// echoes text and binary messages of every size in sizes byte for byte, pings, and closes with
// 1000 expecting 1000 back. Prints one line per run; on any mismatch prints one line and exits 1.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/coder/websocket"
)

var sizes = []int{0, 125, 126, 65536, 1 << 20}

type message struct {
	kind websocket.MessageType
	name string
	data []byte
}

// messages: seeded pseudo-random bytes (binary) and ASCII (text) of every size.
func messages() []message {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789 "
	var out []message
	for _, size := range sizes {
		rng := rand.New(rand.NewSource(int64(size)))
		text := make([]byte, size)
		for i := range text {
			text[i] = letters[rng.Intn(len(letters))]
		}
		bin := make([]byte, size)
		rng.Read(bin)
		out = append(out, message{websocket.MessageText, fmt.Sprintf("text %d B", size), text})
		out = append(out, message{websocket.MessageBinary, fmt.Sprintf("binary %d B", size), bin})
	}
	return out
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/coder/websocket" {
				return dep.Version
			}
		}
	}
	return "?"
}

func run(url string, roots *x509.CertPool, deflate bool, msgs []message) error {
	label := fmt.Sprintf("%s deflate=%v", strings.SplitN(url, ":", 2)[0], map[bool]string{true: "on", false: "off"}[deflate])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled}
	if deflate {
		opts.CompressionMode = websocket.CompressionContextTakeover
		// coder/websocket compresses messages of at least this many bytes (0 means its default,
		// 128): 1 compresses all but the empty one.
		opts.CompressionThreshold = 1
	}
	if strings.HasPrefix(url, "wss:") {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"},
		}}
	}
	c, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return fmt.Errorf("%s: dial: %w", label, err)
	}
	defer c.CloseNow()
	negotiated := resp.Header.Get("Sec-WebSocket-Extensions")
	if deflate != strings.Contains(negotiated, "permessage-deflate") {
		return fmt.Errorf("%s: Sec-WebSocket-Extensions %q", label, negotiated)
	}
	c.SetReadLimit(2 << 20)
	for _, m := range msgs {
		if err := c.Write(ctx, m.kind, m.data); err != nil {
			return fmt.Errorf("%s: %s: write: %w", label, m.name, err)
		}
		kind, echo, err := c.Read(ctx)
		if err != nil {
			return fmt.Errorf("%s: %s: read: %w", label, m.name, err)
		}
		if kind != m.kind || !bytes.Equal(echo, m.data) {
			at := 0
			for at < len(echo) && at < len(m.data) && echo[at] == m.data[at] {
				at++
			}
			return fmt.Errorf("%s: %s: echo is %v of %d B, first difference at byte %d", label, m.name, kind, len(echo), at)
		}
	}
	// Ping waits for the pong, which a reader must be running to see.
	pinged := make(chan error, 1)
	readCtx := c.CloseRead(ctx)
	go func() { pinged <- c.Ping(ctx) }()
	select {
	case err := <-pinged:
		if err != nil {
			return fmt.Errorf("%s: ping: %w", label, err)
		}
	case <-readCtx.Done():
		return fmt.Errorf("%s: ping: the connection ended first", label)
	}
	// Close returns nil only once the peer's close carried the same code.
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		return fmt.Errorf("%s: close 1000: %w", label, err)
	}
	fmt.Printf("go coder/websocket %s %s: %d echoes, ping, close 1000: ok\n", version(), label, len(msgs))
	return nil
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: ws_client CA_FILE URL...")
		os.Exit(2)
	}
	pem, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Printf("go coder/websocket: FAILED: CA: %v\n", err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fmt.Printf("go coder/websocket: FAILED: no certificate in %s\n", os.Args[1])
		os.Exit(1)
	}
	msgs := messages()
	for _, url := range os.Args[2:] {
		for _, deflate := range []bool{false, true} {
			if err := run(url, roots, deflate, msgs); err != nil {
				fmt.Printf("go coder/websocket: FAILED: %v\n", err)
				os.Exit(1)
			}
		}
	}
}
