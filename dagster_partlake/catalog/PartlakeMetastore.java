// partlake's own Hive metastore service: Hive 2.3's metastore handler (from pyspark's JARs) on a
// Thrift socket bound to one address. HiveMetaStore.main binds every interface and Hive 2.3 has
// no setting to change that, so partlake starts the same handler through this class instead.
// Usage: java -cp <conf dir>:<this class>:<pyspark jars>/* PartlakeMetastore <host> <port>
// Settings (the backing database, the warehouse folder) come from hive-site.xml on the class path.
import java.net.InetSocketAddress;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

public final class PartlakeMetastore {
  private PartlakeMetastore() {}

  public static void main(String[] args) throws Throwable {
    if (args.length != 2) {
      System.err.println("usage: PartlakeMetastore <host> <port>");
      System.exit(2);
    }
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
    ThriftHiveMetastore.Iface handler =
        HiveMetaStore.newRetryingHMSHandler("partlake metastore", conf, false);
    TSetIpAddressProcessor<ThriftHiveMetastore.Iface> processor =
        new TSetIpAddressProcessor<>(handler);
    TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
    TThreadPoolServer.Args serverArgs =
        new TThreadPoolServer.Args(socket)
            .processor(processor)
            .transportFactory(new TTransportFactory())
            .protocolFactory(new TBinaryProtocol.Factory())
            .minWorkerThreads(2)
            .maxWorkerThreads(64);
    System.out.println("partlake metastore listening on " + host + ":" + port);
    System.out.flush();
    new TThreadPoolServer(serverArgs).serve();
  }
}
