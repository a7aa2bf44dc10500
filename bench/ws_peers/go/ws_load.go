// A closed-loop WebSocket load client on github.com/coder/websocket, for bench/ws_goals.py
// (its echo server is the interop peer, crates/sockscale/tests/interop/go/server).
//
// Usage: ws_load URL CONNS SIZE SECONDS [PIPELINE]
//
// CONNS connections, each sends PIPELINE (default 1) binary messages of SIZE bytes (c.Write: one
// frame each) and then another for every echo that comes back (read into a reused buffer, checked
// byte for byte), for SECONDS; prints
// {"messages":N,"errors":E,"seconds":S}. Run it with GOMAXPROCS=1 for one core. Compression is
// not offered (as in the sockscale runs).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) != 5 && len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: ws_load URL CONNS SIZE SECONDS [PIPELINE]")
		os.Exit(2)
	}
	conns, err1 := strconv.Atoi(os.Args[2])
	size, err2 := strconv.Atoi(os.Args[3])
	secs, err3 := strconv.ParseFloat(os.Args[4], 64)
	pipeline, err4 := 1, error(nil)
	if len(os.Args) == 6 {
		pipeline, err4 = strconv.Atoi(os.Args[5])
	}
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || conns < 1 || size < 0 || secs <= 0 || pipeline < 1 {
		fmt.Fprintln(os.Stderr, "ws_load: CONNS, SIZE, SECONDS and PIPELINE must be positive numbers")
		os.Exit(2)
	}
	load(os.Args[1], conns, size, secs, pipeline)
}

func load(url string, conns, size int, secs float64, pipeline int) {
	ctx := context.Background()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i*7 + 3)
	}
	var stop atomic.Bool
	var messages, errors atomic.Int64
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	clients := make([]*websocket.Conn, conns)
	for i := range clients {
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(1)
		}
		clients[i] = c
	}
	for _, c := range clients {
		ready.Add(1)
		done.Add(1)
		go func(c *websocket.Conn) {
			defer done.Done()
			echo := make([]byte, size+1)
			ready.Done()
			<-start
			// Every message is the same, so an echo answers whichever is oldest: one goroutine
			// writes the first PIPELINE, then one more after each echo read.
			for i := 1; i < pipeline; i++ {
				if err := c.Write(ctx, websocket.MessageBinary, payload); err != nil {
					errors.Add(1)
					return
				}
			}
			for !stop.Load() {
				if err := c.Write(ctx, websocket.MessageBinary, payload); err != nil {
					errors.Add(1)
					return
				}
				_, reader, err := c.Reader(ctx)
				if err != nil {
					errors.Add(1)
					return
				}
				n, err := io.ReadFull(reader, echo)
				// echo has room for one byte more than sent: a full read means the echo was too long.
				if (err != io.ErrUnexpectedEOF && err != io.EOF) || n != size || !bytes.Equal(echo[:n], payload) {
					errors.Add(1)
					return
				}
				messages.Add(1)
			}
		}(c)
	}
	ready.Wait()
	began := time.Now()
	close(start)
	time.Sleep(time.Duration(secs * float64(time.Second)))
	stop.Store(true)
	elapsed := time.Since(began).Seconds()
	count := messages.Load()
	done.Wait()
	for _, c := range clients {
		c.Close(websocket.StatusNormalClosure, "")
	}
	out, _ := json.Marshal(map[string]any{"messages": count, "errors": errors.Load(), "seconds": elapsed})
	fmt.Println(string(out))
}
