#include <gtest/gtest.h>

#include "server/server.h"
#include "server/util.h"

using namespace vatic::server;

TEST(ServerUtil, KeepAliveDurations) {
  EXPECT_DOUBLE_EQ(parse_duration_text("5m"), 300);
  EXPECT_DOUBLE_EQ(parse_duration_text("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration_text("30s"), 30);
  EXPECT_DOUBLE_EQ(parse_duration_text("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(parse_duration_text("0"), 0);
  EXPECT_DOUBLE_EQ(parse_duration_text("120"), 120);
  EXPECT_LT(parse_duration_text("-1"), 0);
  EXPECT_LT(parse_duration_text("-1m"), 0);
  EXPECT_DOUBLE_EQ(parse_keep_alive(vatic::ordered_json(42)), 42);
  EXPECT_THROW(parse_duration_text("soon"), vatic::InvalidInput);
  EXPECT_THROW(parse_duration_text("5 parsecs"), vatic::InvalidInput);
  EXPECT_THROW(parse_keep_alive(vatic::ordered_json::array()), vatic::InvalidInput);
}

TEST(ServerUtil, HostParsing) {
  std::string host = "127.0.0.1";
  int port = 11435;
  parse_host("0.0.0.0:8080", &host, &port);
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_EQ(port, 8080);
  parse_host("http://localhost:9000/", &host, &port);
  EXPECT_EQ(host, "localhost");
  EXPECT_EQ(port, 9000);
  parse_host("[::1]:7000", &host, &port);
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7000);
  EXPECT_THROW(parse_host("host:notaport", &host, &port), vatic::InvalidInput);
}

TEST(ServerUtil, Rfc3339) {
  std::string t = rfc3339_now();
  ASSERT_EQ(t.size(), 30u) << t;
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t.back(), 'Z');
}
