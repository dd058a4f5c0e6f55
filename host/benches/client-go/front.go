package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes/scheme"
)

// The media type of Kubernetes protobuf.
const protobufType = "application/vnd.kubernetes.protobuf"

// serveFront is the server side of client-go's protobuf runs: it forwards each request to the
// JSON-only API server double and answers in protobuf, as a real API server does when asked,
// so client-go reads protobuf and the conversion is the server's work, in this process, not
// client-go's. It prints "listening URL" once it accepts connections.
func serveFront(server string) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), protobufType)
	if !ok || info.StreamSerializer == nil {
		fail(fmt.Errorf("no protobuf serializer"))
	}
	encoder := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	fmt.Printf("listening http://%s\n", listener.Addr())
	err = http.Serve(listener, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, server+r.URL.RequestURI(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			// Errors stay JSON Status objects, which client-go reads whatever it asked for.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		if r.URL.Query().Get("watch") == "true" {
			frontWatch(w, resp.Body, info, encoder)
		} else {
			frontList(w, resp.Body, encoder)
		}
	}))
	fail(err)
}

// frontList answers a list in protobuf.
func frontList(w http.ResponseWriter, body io.Reader, encoder runtime.Encoder) {
	var pods corev1.PodList
	if err := json.NewDecoder(body).Decode(&pods); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", protobufType)
	if err := encoder.Encode(&pods, w); err != nil {
		fmt.Fprintln(os.Stderr, "front: list:", err)
	}
}

// frontWatch turns the double's JSON watch lines into protobuf watch frames, as the API server
// frames them: each a WatchEvent whose object is the enveloped protobuf of a Pod (or a Status
// for errors).
func frontWatch(w http.ResponseWriter, body io.Reader, info runtime.SerializerInfo, encoder runtime.Encoder) {
	w.Header().Set("Content-Type", protobufType+";stream=watch")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	frames := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(w), info.StreamSerializer.Serializer)
	lines := bufio.NewReaderSize(body, 1<<16)
	for {
		line, err := lines.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var event struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if jerr := json.Unmarshal(line, &event); jerr != nil {
				fmt.Fprintln(os.Stderr, "front: watch line:", jerr)
				return
			}
			var object runtime.Object = &corev1.Pod{}
			if event.Type == "ERROR" {
				object = &metav1.Status{}
			}
			if jerr := json.Unmarshal(event.Object, object); jerr != nil {
				fmt.Fprintln(os.Stderr, "front: watch object:", jerr)
				return
			}
			raw, eerr := runtime.Encode(encoder, object)
			if eerr == nil {
				eerr = frames.Encode(&metav1.WatchEvent{Type: event.Type, Object: runtime.RawExtension{Raw: raw}})
			}
			if eerr != nil {
				fmt.Fprintln(os.Stderr, "front: watch:", eerr)
				return
			}
			if flusher != nil && lines.Buffered() == 0 {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
