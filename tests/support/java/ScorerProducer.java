// A producer on the Java client (kafka-clients, from the broker's own jars), driven
// by tests/support/clients.py: the records and transaction steps come from a file,
// one a line, the producer's config from key=value arguments.
//
//   java -cp CLASSES:LIB/* ScorerProducer STEPS_FILE bootstrap.servers=... [key=value ...]
//
// STEPS_FILE lines: "R <topic> <base64 key or -> <base64 value>" sends a record;
// "BEGIN", "COMMIT", "ABORT" (flush first, then abort) drive a transaction (with a
// transactional.id). Each acknowledged record is printed as "ACK <index> <partition>
// <offset>" (index: its place among the R lines), in order; any failure exits 1.

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ScorerProducer {
    private static final List<Future<RecordMetadata>> pending = new ArrayList<>();
    private static int acknowledged = 0;

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        Base64.Decoder base64 = Base64.getDecoder();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (props.containsKey("transactional.id")) {
                producer.initTransactions();
            }
            for (String line : Files.readAllLines(Paths.get(args[0]))) {
                String[] parts = line.split(" ");
                switch (parts[0]) {
                    case "R":
                        byte[] key = parts[2].equals("-") ? null : base64.decode(parts[2]);
                        byte[] value = base64.decode(parts[3]);
                        pending.add(producer.send(new ProducerRecord<>(parts[1], key, value)));
                        break;
                    case "BEGIN":
                        producer.beginTransaction();
                        break;
                    case "COMMIT":
                        producer.commitTransaction();
                        drain();
                        break;
                    case "ABORT":
                        producer.flush();
                        drain();
                        producer.abortTransaction();
                        break;
                    default:
                        throw new IllegalArgumentException("unknown step: " + parts[0]);
                }
            }
            producer.flush();
            drain();
        }
        System.out.flush();
    }

    private static void drain() throws Exception {
        for (Future<RecordMetadata> future : pending) {
            RecordMetadata meta = future.get();
            System.out.println("ACK " + acknowledged++ + " " + meta.partition() + " " + meta.offset());
        }
        pending.clear();
    }
}
