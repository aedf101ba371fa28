// Command upstream is the stand-in inference server of scripts/bench-proxy.sh.
// On each address it is given it answers every request with one fixed
// OpenAI chat completion, after reading the request body to its end.
//
// It speaks only the HTTP/1.1 that wrk, HAProxy and Go's Transport send
// (keep-alive, a Content-Length or chunked body) and skips net/http on
// purpose: the cheaper the upstream, the more of the measured time is the
// proxy's, which is what the benchmark compares.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httputil"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

const completion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,` +
	`"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant",` +
	`"content":"OK."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":512,"completion_tokens":2,"total_tokens":514}}`

var response = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
	strconv.Itoa(len(completion)) + "\r\n\r\n" + completion)

func main() {
	listen := flag.String("listen", "127.0.0.1:9101", "comma-separated addresses to serve on")
	flag.Parse()
	for _, addr := range strings.Split(*listen, ",") {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		go accept(ln)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
}

func accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c)
	}
}

// serve answers the requests of one connection until the client closes it.
func serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		h, err := readHead(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				log.Printf("upstream: %v", err)
			}
			return
		}
		if err := discardBody(br, h); err != nil {
			log.Printf("upstream: body: %v", err)
			return
		}
		if _, err := c.Write(response); err != nil || h.close {
			return
		}
	}
}

// head is what serve needs from a request's header.
type head struct {
	length  int64
	chunked bool
	close   bool
}

func readHead(br *bufio.Reader) (head, error) {
	var h head
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case first:
			h.close = bytes.HasSuffix(line, []byte("HTTP/1.0"))
		case len(line) == 0:
			return h, nil
		default:
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				return h, fmt.Errorf("malformed header line %q", line)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				if h.length, err = strconv.ParseInt(string(value), 10, 64); err != nil {
					return h, fmt.Errorf("content-length %q", value)
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				h.chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
			case bytes.EqualFold(name, []byte("Connection")):
				h.close = bytes.EqualFold(value, []byte("close"))
			}
		}
	}
}

func discardBody(br *bufio.Reader, h head) error {
	if !h.chunked {
		_, err := br.Discard(int(h.length))
		return err
	}
	if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
		return err
	}
	for { // trailer section, ended by an empty line
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}
