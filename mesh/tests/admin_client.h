// The tests' client of the proxy's admin listener (in-process control planes).
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <cstdint>
#include <string>

namespace dpukit::mesh::testing {

// A loopback port that is free now (the proxy binds it next).
inline uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// The admin's status for GET `target` (0 when it does not answer).
inline unsigned admin_status(uint16_t port, const std::string& target) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket sock(io);
  boost::system::error_code ec;
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) return 0;
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "admin");
  http::write(sock, req, ec);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(sock, buffer, res, ec);
  return ec ? 0 : res.result_int();
}

}  // namespace dpukit::mesh::testing
