package busgate.spark;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.hadoop.shaded.javax.ws.rs.core.Application;
import org.apache.hadoop.shaded.javax.ws.rs.core.Link;
import org.apache.hadoop.shaded.javax.ws.rs.core.MediaType;
import org.apache.hadoop.shaded.javax.ws.rs.core.Response;
import org.apache.hadoop.shaded.javax.ws.rs.core.UriBuilder;
import org.apache.hadoop.shaded.javax.ws.rs.core.Variant;
import org.apache.hadoop.shaded.javax.ws.rs.ext.RuntimeDelegate;

/**
 * What lets Hadoop's WebHDFS client in PySpark's jars read a NameNode's replies.
 *
 * <p>A NameNode answers with {@code Content-Type: application/json}; WebHdfsFileSystem checks that
 * header with JAX-RS's {@code MediaType.valueOf}, which asks a JAX-RS runtime to parse it. The
 * shaded {@code hadoop-client-runtime} Spark ships has the JAX-RS API but no runtime, so every
 * webhdfs:// call fails with {@code ClassNotFoundException:
 * org.apache.hadoop.shaded.org.glassfish.jersey.internal.RuntimeDelegateImpl}. This is the one
 * part of a runtime that call needs: media types (anything else is refused). It is installed
 * only when no runtime is found.
 */
public final class MediaTypes extends RuntimeDelegate {
  private static volatile boolean installed;

  /** Install this runtime unless a JAX-RS runtime is already there. */
  public static void install() {
    if (installed) {
      return;
    }
    synchronized (MediaTypes.class) {
      if (!installed) {
        try {
          RuntimeDelegate.getInstance();
        } catch (RuntimeException | LinkageError e) {
          RuntimeDelegate.setInstance(new MediaTypes());
        }
        installed = true;
      }
    }
  }

  /** Parses {@code type/subtype; name=value; ...} (RFC 9110 section 8.3.1). */
  static final class Parser implements HeaderDelegate<MediaType> {
    @Override
    public MediaType fromString(String value) {
      if (value == null) {
        throw new IllegalArgumentException("media type is null");
      }
      String[] parts = value.split(";");
      String full = parts[0].trim();
      int slash = full.indexOf('/');
      String type = slash < 0 ? full : full.substring(0, slash).trim();
      String subtype = slash < 0 ? MediaType.MEDIA_TYPE_WILDCARD : full.substring(slash + 1).trim();
      if (type.isEmpty() || subtype.isEmpty()) {
        throw new IllegalArgumentException("bad media type: " + value);
      }
      Map<String, String> params = new LinkedHashMap<>();
      for (int i = 1; i < parts.length; i++) {
        int eq = parts[i].indexOf('=');
        if (eq > 0) {
          String v = parts[i].substring(eq + 1).trim();
          if (v.length() >= 2 && v.startsWith("\"") && v.endsWith("\"")) {
            v = v.substring(1, v.length() - 1);
          }
          params.put(parts[i].substring(0, eq).trim().toLowerCase(java.util.Locale.ROOT), v);
        }
      }
      return new MediaType(type, subtype, params);
    }

    @Override
    public String toString(MediaType value) {
      StringBuilder out = new StringBuilder(value.getType()).append('/').append(value.getSubtype());
      for (Map.Entry<String, String> p : value.getParameters().entrySet()) {
        out.append(';').append(p.getKey()).append('=').append(p.getValue());
      }
      return out.toString();
    }
  }

  @Override
  @SuppressWarnings("unchecked")
  public <T> HeaderDelegate<T> createHeaderDelegate(Class<T> type) {
    if (type == MediaType.class) {
      return (HeaderDelegate<T>) new Parser();
    }
    throw new IllegalArgumentException("busgate's JAX-RS stand-in parses media types only");
  }

  private static UnsupportedOperationException refused() {
    return new UnsupportedOperationException("busgate's JAX-RS stand-in parses media types only");
  }

  @Override
  public UriBuilder createUriBuilder() {
    throw refused();
  }

  @Override
  public Response.ResponseBuilder createResponseBuilder() {
    throw refused();
  }

  @Override
  public Variant.VariantListBuilder createVariantListBuilder() {
    throw refused();
  }

  @Override
  public <T> T createEndpoint(Application application, Class<T> endpointType) {
    throw refused();
  }

  @Override
  public Link.Builder createLinkBuilder() {
    throw refused();
  }
}
