package kubewasm

// Log writes structured lines into the host's log: a message, then key and value pairs.
//
//	kubewasm.Log.Info("pod seen", "pod", key, "phase", phase)
var Log logger

type logger struct{}

func (logger) write(level Level, message string, kv []string) {
	fields := make([][2]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		fields = append(fields, [2]string{kv[i], kv[i+1]})
	}
	if len(kv)%2 == 1 {
		fields = append(fields, [2]string{kv[len(kv)-1], ""})
	}
	Logging.Log(level, message, fields)
}

// Debug writes a debug line.
func (l logger) Debug(message string, kv ...string) { l.write(LevelDebug, message, kv) }

// Info writes an info line.
func (l logger) Info(message string, kv ...string) { l.write(LevelInfo, message, kv) }

// Warn writes a warning.
func (l logger) Warn(message string, kv ...string) { l.write(LevelWarn, message, kv) }

// Error writes an error line.
func (l logger) Error(message string, kv ...string) { l.write(LevelError, message, kv) }
