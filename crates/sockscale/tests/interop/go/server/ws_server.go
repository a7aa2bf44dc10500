// Interop and benchmark peer: a Go github.com/coder/websocket echo server.
//
// Usage (from crates/sockscale/tests/interop/go):
//
//	go build -o ws_server ./server && ./ws_server ADDR [CERT_FILE KEY_FILE]
//
// e.g. `GOMAXPROCS=1 ./ws_server 127.0.0.1:9001` (ws://) or `./ws_server 127.0.0.1:0 cert.pem key.pem`
// (wss://). Listens on ADDR (port 0: one the OS picks), prints the bound address (`127.0.0.1:PORT`)
// on one line once it accepts, then echoes every message as received (text as text, binary as
// binary), answers pings and closes (the library does); permessage-deflate is agreed when a client
// offers it. Runs until killed.
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/coder/websocket"
)

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		CompressionMode: websocket.CompressionContextTakeover,
		// Compress every message but the empty one (0 would mean the library's default, 128 B).
		CompressionThreshold: 1,
	})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	ctx := context.Background()
	for {
		kind, data, err := c.Read(ctx)
		if err != nil {
			// A close from the client was answered with its code by Read; anything else ends here.
			return
		}
		if err := c.Write(ctx, kind, data); err != nil {
			return
		}
	}
}

func main() {
	if len(os.Args) != 2 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: ws_server ADDR [CERT_FILE KEY_FILE]")
		os.Exit(2)
	}
	listener, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "ws_server: listen on %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	server := &http.Server{Handler: http.HandlerFunc(echo)}
	if len(os.Args) == 4 {
		cert, err := tls.LoadX509KeyPair(os.Args[2], os.Args[3])
		if err != nil {
			fmt.Fprintf(os.Stderr, "ws_server: certificate: %v\n", err)
			os.Exit(1)
		}
		// HTTP/1.1 only: the upgrade is an HTTP/1.1 request.
		listener = tls.NewListener(listener, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	}
	fmt.Println(listener.Addr().String())
	if err := server.Serve(listener); err != nil {
		fmt.Fprintf(os.Stderr, "ws_server: %v\n", err)
		os.Exit(1)
	}
}
