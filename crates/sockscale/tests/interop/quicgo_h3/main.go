// Interop peer: quic-go's HTTP/3 server and client (github.com/quic-go/quic-go/http3), for the
// HTTP/3 interop tests of sockscale (tests/h3_peers.rs, tests/support/h3.rs).
//
//	quicgo_h3 server -addr 127.0.0.1:0 -cert C -key K
//	    Prints its bound UDP port on stdout as one line, then serves until killed:
//	    GET / ("hello"), GET /bytes/N (N bytes), POST /echo (the request body). 0-RTT allowed.
//	    On stderr, one line per handshake (resumed, 0-RTT) and per closed connection (key updates).
//	quicgo_h3 client [-insecure|-cacert F] [-n N] [-c C] [-body-file F] [-method M] [-resume] [-0rtt] URL
//	    N requests (C at a time) on one connection. With -resume (or -0rtt) a first connection
//	    fetches URL once to get a session ticket and closes; the measured connection resumes it
//	    (with -0rtt, sending its requests as 0-RTT). Prints one JSON line; exits 1 on any failure.
//
// quic-go updates its 1-RTT keys by itself after its first 100 packets; the client counts the key
// updates from quic-go's qlog events (security:key_updated), without writing a qlog file.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: quicgo_h3 server|client [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "server":
		server(os.Args[2:])
	case "client":
		client(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "quicgo_h3: unknown mode %q (server or client)\n", os.Args[1])
		os.Exit(2)
	}
}

// keyUpdates counts a connection's 1-RTT key updates from its qlog events: quic-go records two
// events per update (client and server keys), so only the client key's are counted.
type keyUpdates struct {
	local, remote atomic.Int64
	producers     atomic.Int64
	onClose       func(local, remote int64)
}

func (k *keyUpdates) AddProducer() qlogwriter.Recorder {
	k.producers.Add(1)
	return recorder{k}
}

type recorder struct{ k *keyUpdates }

func (r recorder) RecordEvent(ev qlogwriter.Event) {
	if e, ok := ev.(qlog.KeyUpdated); ok && e.KeyType == qlog.KeyTypeClient1RTT {
		switch e.Trigger {
		case qlog.KeyUpdateLocal:
			r.k.local.Add(1)
		case qlog.KeyUpdateRemote:
			r.k.remote.Add(1)
		}
	}
}

func (r recorder) Close() error {
	if r.k.producers.Add(-1) == 0 && r.k.onClose != nil {
		r.k.onClose(r.k.local.Load(), r.k.remote.Load())
	}
	return nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "quicgo_h3: "+format+"\n", args...)
	os.Exit(1)
}

func server(args []string) {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "UDP address to listen on")
	certFile := fs.String("cert", "", "certificate chain (PEM)")
	keyFile := fs.String("key", "", "private key (PEM)")
	fs.Parse(args)
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fail("load -cert/-key: %v", err)
	}
	udpAddr, err := net.ResolveUDPAddr("udp", *addr)
	if err != nil {
		fail("-addr %s: %v", *addr, err)
	}
	conn, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		fail("listen %s: %v", *addr, err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	})
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
		if err != nil || n < 0 || n > 1<<30 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for n > 0 {
			part := chunk[:min(int64(len(chunk)), n)]
			if _, err := w.Write(part); err != nil {
				return
			}
			n -= int64(len(part))
		}
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	})

	var conns atomic.Int64
	srv := &http3.Server{
		Handler: mux,
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			go func() {
				select {
				case <-c.HandshakeComplete():
					state := c.ConnectionState()
					fmt.Fprintf(os.Stderr, "handshake from %s: alpn=%s resumed=%t used_0rtt=%t\n",
						c.RemoteAddr(), state.TLS.NegotiatedProtocol, state.TLS.DidResume, state.Used0RTT)
				case <-c.Context().Done():
				}
			}()
			return ctx
		},
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		QUICConfig: &quic.Config{
			Allow0RTT:          true,
			MaxIncomingStreams: 1000,
			Tracer: func(ctx context.Context, isClient bool, id quic.ConnectionID) qlogwriter.Trace {
				n := conns.Add(1)
				return &keyUpdates{onClose: func(local, remote int64) {
					fmt.Fprintf(os.Stderr, "connection %d closed: key_updates_local=%d key_updates_remote=%d\n", n, local, remote)
				}}
			},
		},
	}
	fmt.Println(conn.LocalAddr().(*net.UDPAddr).Port)
	if err := srv.Serve(conn); err != nil {
		fail("serve: %v", err)
	}
}

type body struct {
	Sha256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	Count  int    `json:"count"`
}

type report struct {
	RequestsOK       int      `json:"requests_ok"`
	RequestsFailed   int      `json:"requests_failed"`
	BytesReceived    int64    `json:"bytes_received"`
	Bodies           []body   `json:"bodies"`
	Resumed          bool     `json:"resumed"`
	Used0RTT         bool     `json:"used_0rtt"`
	ALPN             string   `json:"alpn"`
	QUICVersion      string   `json:"quic_version"`
	KeyUpdatesLocal  int64    `json:"key_updates_local"`
	KeyUpdatesRemote int64    `json:"key_updates_remote"`
	Statuses         []int    `json:"statuses"`
	Seconds          float64  `json:"seconds"`
	Errors           []string `json:"errors"`
}

func client(args []string) {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	insecure := fs.Bool("insecure", false, "do not verify the server's certificate")
	caFile := fs.String("cacert", "", "trust this CA (PEM) instead of the system's")
	n := fs.Int("n", 1, "requests")
	c := fs.Int("c", 1, "requests in flight at a time (streams on the one connection)")
	bodyFile := fs.String("body-file", "", "send this file as the request body (method POST unless -method)")
	method := fs.String("method", "", "request method (GET, or POST with -body-file)")
	resume := fs.Bool("resume", false, "resume a session from a first connection")
	zeroRTT := fs.Bool("0rtt", false, "resume and send the requests as 0-RTT (GET only)")
	timeout := fs.Duration("timeout", 30*time.Second, "limit for the whole run")
	fs.Parse(args)
	if fs.NArg() != 1 {
		fail("client: one URL expected, got %d", fs.NArg())
	}
	url := fs.Arg(0)
	if *n < 1 || *c < 1 {
		fail("client: -n and -c must be at least 1")
	}
	var reqBody []byte
	if *bodyFile != "" {
		var err error
		if reqBody, err = os.ReadFile(*bodyFile); err != nil {
			fail("-body-file: %v", err)
		}
	}
	if *method == "" {
		*method = http.MethodGet
		if *bodyFile != "" {
			*method = http.MethodPost
		}
	}
	if *zeroRTT {
		if *method != http.MethodGet {
			fail("-0rtt sends GET only (0-RTT requests must be idempotent)")
		}
		*resume = true
	}

	tlsConf := &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	switch {
	case *insecure:
		tlsConf.InsecureSkipVerify = true
	case *caFile != "":
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("-cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("-cacert %s: no PEM certificate in it", *caFile)
		}
		tlsConf.RootCAs = pool
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var rep report
	rep.Errors = []string{}
	start := time.Now()
	if *resume {
		// The first connection: one request, then wait for the session ticket (sent after the
		// handshake) before closing, so the measured connection can resume.
		warm := &http3.Transport{TLSClientConfig: tlsConf.Clone()}
		warm.TLSClientConfig.ClientSessionCache = tlsConf.ClientSessionCache
		if err := warmUp(ctx, warm, url, tlsConf.ClientSessionCache); err != nil {
			rep.Errors = append(rep.Errors, "first connection: "+err.Error())
			rep.RequestsFailed = *n
			finish(&rep, start)
		}
		warm.Close()
	}

	tracer := &keyUpdates{}
	var connMu sync.Mutex
	var conn *quic.Conn
	tr := &http3.Transport{
		TLSClientConfig: tlsConf,
		QUICConfig: &quic.Config{
			Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return tracer },
		},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			// Only an early dial may send 0-RTT: without -0rtt the resumed handshake is a 1-RTT one.
			dial := quic.DialAddr
			if *zeroRTT {
				dial = quic.DialAddrEarly
			}
			qc, err := dial(ctx, addr, tlsCfg, cfg)
			if err == nil {
				connMu.Lock()
				conn = qc
				connMu.Unlock()
			}
			return qc, err
		},
	}
	defer tr.Close()
	reqMethod := *method
	if *zeroRTT {
		reqMethod = http3.MethodGet0RTT
	}

	type result struct {
		status int
		body   []byte
		tls    *tls.ConnectionState
		err    error
	}
	results := make(chan result, *n)
	jobs := make(chan struct{}, *n)
	for range *n {
		jobs <- struct{}{}
	}
	close(jobs)
	var wg sync.WaitGroup
	for range min(*c, *n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				var rd io.Reader
				if reqBody != nil {
					rd = bytes.NewReader(reqBody)
				}
				req, err := http.NewRequestWithContext(ctx, reqMethod, url, rd)
				if err != nil {
					results <- result{err: err}
					continue
				}
				if reqBody != nil {
					req.ContentLength = int64(len(reqBody))
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					results <- result{err: err}
					continue
				}
				data, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				results <- result{status: resp.StatusCode, body: data, tls: resp.TLS, err: err}
			}
		}()
	}
	wg.Wait()
	close(results)

	bodies := map[string]*body{}
	statuses := map[int]bool{}
	errs := map[string]int{}
	for r := range results {
		if r.status != 0 {
			statuses[r.status] = true
		}
		if r.tls != nil {
			rep.Resumed = r.tls.DidResume
			rep.ALPN = r.tls.NegotiatedProtocol
		}
		rep.BytesReceived += int64(len(r.body))
		if r.err != nil {
			rep.RequestsFailed++
			errs[r.err.Error()]++
			continue
		}
		rep.RequestsOK++
		sum := sha256.Sum256(r.body)
		key := hex.EncodeToString(sum[:])
		if bodies[key] == nil {
			bodies[key] = &body{Sha256: key, Bytes: len(r.body)}
		}
		bodies[key].Count++
	}
	for _, b := range bodies {
		rep.Bodies = append(rep.Bodies, *b)
	}
	sort.Slice(rep.Bodies, func(i, j int) bool { return rep.Bodies[i].Sha256 < rep.Bodies[j].Sha256 })
	for s := range statuses {
		rep.Statuses = append(rep.Statuses, s)
	}
	sort.Ints(rep.Statuses)
	for e, count := range errs {
		rep.Errors = append(rep.Errors, fmt.Sprintf("%s (x%d)", e, count))
	}
	sort.Strings(rep.Errors)
	connMu.Lock()
	if conn != nil {
		state := conn.ConnectionState()
		rep.Used0RTT = state.Used0RTT
		rep.QUICVersion = state.Version.String()
		if rep.ALPN == "" {
			rep.ALPN = state.TLS.NegotiatedProtocol
			rep.Resumed = state.TLS.DidResume
		}
	}
	connMu.Unlock()
	rep.KeyUpdatesLocal = tracer.local.Load()
	rep.KeyUpdatesRemote = tracer.remote.Load()
	if *resume && !rep.Resumed {
		rep.Errors = append(rep.Errors, "the session was not resumed")
	}
	if *zeroRTT && !rep.Used0RTT {
		rep.Errors = append(rep.Errors, "0-RTT was not used")
	}
	finish(&rep, start)
}

// warmUp fetches url once on tr's connection and waits (up to 2 s) until the session cache holds
// a ticket for the server.
func warmUp(ctx context.Context, tr *http3.Transport, url string, cache tls.ClientSessionCache) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	host := req.URL.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		// quic-go keys its tickets by the server name, as crypto/tls does.
		if state, ok := cache.Get(host); ok && state != nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("no session ticket within 2s of the first response")
}

func finish(rep *report, start time.Time) {
	rep.Seconds = time.Since(start).Seconds()
	if rep.Bodies == nil {
		rep.Bodies = []body{}
	}
	if rep.Statuses == nil {
		rep.Statuses = []int{}
	}
	out, err := json.Marshal(rep)
	if err != nil {
		fail("encode report: %v", err)
	}
	fmt.Println(string(out))
	if rep.RequestsFailed > 0 || len(rep.Errors) > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}
